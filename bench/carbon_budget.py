"""How long a failing Electricity Maps API holds a task: the client's time budget.

Starts a local server on 127.0.0.1 that answers every request with HTTP 503 (it stops with
the script), then times the client's lookups through the real ``ElectricityMapsClient`` with
``retries=40`` (the red team's setting that held a task 15 min 52 s): the accounting's lookup
of a past span, and a carbon-aware start's lookup of the forecast up to a deadline 2 s away.
Prints each lookup's wall time, the requests the server saw and the error the caller falls
back on. No GPU and no Airflow needed.

    PYTHONPATH=. .venv/bin/python bench/carbon_budget.py [--retries 40] [--budget-s 5]

Results are recorded in bench/RESULTS.md ("Carbon lookups against a failing API").
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from zeus_airflow.core.carbon.electricitymaps import DEFAULT_BUDGET_S, ElectricityMapsClient
from zeus_airflow.core.carbon.signal import SourceError


@contextmanager
def failing_server() -> Iterator[tuple[str, list[str]]]:
    """(base URL, the paths requested) of a server answering 503 to everything."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v3", seen
    finally:
        server.shutdown()
        server.server_close()


def timed_lookup(
    client: ElectricityMapsClient, start: datetime, end: datetime
) -> tuple[float, str]:
    began = time.monotonic()
    try:
        client.points("DE", start, end)
        outcome = "answered"
    except SourceError as err:
        outcome = str(err)
    return time.monotonic() - began, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retries", type=int, default=40)
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a 0.5 s budget: that the script runs (the suite runs it)",
    )
    args = parser.parse_args()
    if args.quick:
        args.budget_s = 0.5
    with failing_server() as (url, seen):
        client = ElectricityMapsClient(
            "token", base_url=url, retries=args.retries, budget_s=args.budget_s, cache_ttl_s=0
        )
        for name, before_s, after_s in (
            ("accounting (the past hour)", 3600, 0),
            ("planning (a deadline 2 s away)", 0, 2),
        ):
            now = datetime.now(UTC)
            start, end = now - timedelta(seconds=before_s), now + timedelta(seconds=after_s)
            before = len(seen)
            seconds, outcome = timed_lookup(client, start, end)
            print(
                f"{name}: {seconds:.2f} s, {len(seen) - before} requests; falls back on: {outcome}"
            )


if __name__ == "__main__":
    main()
