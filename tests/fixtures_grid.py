"""A local stand-in for the Electricity Maps API: an HTTP server on 127.0.0.1 that answers
each request with the next scripted response, in the API's v3 response format, and records
what it was asked. It runs in a daemon thread and is shut down by the fixture."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    """A JSON value, or bytes sent as they are."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class FakeElectricityMaps:
    url: str
    replies: list[Reply] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def script(self, *replies: Reply) -> None:
        self.replies[:] = replies


def em_item(moment: datetime, intensity: float, **extra: Any) -> dict[str, Any]:
    """One figure as the API writes it."""
    return {
        "zone": "DE",
        "carbonIntensity": intensity,
        "datetime": moment.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "updatedAt": "2026-11-24T08:00:00.000Z",
        "emissionFactorType": "lifecycle",
        "isEstimated": False,
        "temporalGranularity": "hourly",
        **extra,
    }


def em_history(start: datetime, values: list[float]) -> dict[str, Any]:
    return {
        "zone": "DE",
        "history": [em_item(start + timedelta(hours=i), v) for i, v in enumerate(values)],
    }


def em_forecast(start: datetime, values: list[float]) -> dict[str, Any]:
    return {
        "zone": "DE",
        "forecast": [
            {
                "carbonIntensity": v,
                "datetime": (start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            }
            for i, v in enumerate(values)
        ],
        "updatedAt": "2026-11-24T08:00:00.000Z",
    }


@pytest.fixture
def electricity_maps() -> Iterator[FakeElectricityMaps]:
    fake: FakeElectricityMaps

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            reply = fake.replies.pop(0) if fake.replies else Reply(500, {"error": "unscripted"})
            time.sleep(reply.delay_s)
            raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake = FakeElectricityMaps(f"http://127.0.0.1:{server.server_address[1]}/v3")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
