"""Server time of the Zeus job page for a job with 1,000 runs (target: <= 300 ms).

Fills a fresh SQLite store with ``--runs`` recurrences of one job through the real engine on
a replayed paper workload (pruning, failed tries, profiles, then sampling), starts a real
``airflow api-server`` (fresh AIRFLOW_HOME, simple auth manager, one worker) on 127.0.0.1,
and requests the job page ``--requests`` times with a Bearer token after a few warm-up
requests. The server time is the api-server's own ``duration_us`` from its access log; the
client's wall time is shown beside it. Then the same page is broken down in this process:
store reads, charts, template. The last line is ``runs=<n> server_p50_ms=<x>
server_p95_ms=<x> page_kb=<x>``; the exit status is 1 when the median exceeds the target.

    python bench/ui_job_page.py --runs 1000 --requests 30 [--traces DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 300.0
JOB_ID = "bench_dag.train"
WARMUP = 3


def fill_store(url: str, runs: int, workload: str, traces: str | None) -> float:
    """``runs`` recurrences of one job on a replayed V100; returns the seconds it took."""
    from zeus_airflow.core.common.config import JobConfig
    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.store.base import RecurrenceKey
    from zeus_airflow.core.store.sql import SQLStore
    from zeus_airflow.core.train.engine import Engine
    from zeus_airflow.core.train.replay_training import ReplayTraining

    trace = load_workload_trace(resolve_traces_dir(traces), "v100", workload)
    gpu, store = ReplayGPU(trace), SQLStore(url, create_schema=True)
    config = JobConfig(
        JOB_ID,
        trace.batch_sizes,
        trace.default_batch_size,
        trace.workload.target_metric,
        trace.workload.max_epochs,
        trace.workload.higher_is_better,
    )
    engine, train = Engine(store, gpu, config, seed=1, heartbeat_s=None), ReplayTraining(gpu, 1)
    started = time.perf_counter()
    for i in range(runs):
        engine.run_recurrence(
            train, RecurrenceKey(run_id=f"scheduled__{i:05d}", dag_id="bench_dag", task_id="train")
        )
    store.engine.dispose()
    return time.perf_counter() - started


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    """``--workload`` and ``--traces``: the replayed paper workload that fills the store;
    ``--airflow-db``: a migrated metadata database to start from."""
    parser.add_argument("--workload", default="cifar100")
    parser.add_argument(
        "--traces",
        default=None,
        help="default: $ZEUS_TRACES_DIR, else the traces shipped in the package",
    )
    parser.add_argument(
        "--airflow-db",
        type=Path,
        default=None,
        help="an Airflow metadata database (SQLite) already migrated by this Airflow, copied "
        "instead of running `airflow db migrate` (about 10 s; the suite passes its own)",
    )


def bench_home(prefix: str) -> tuple[Path, str]:
    """A fresh folder with AIRFLOW_HOME, its metadata database and the store's URL under it,
    set in the environment (the api-server started later inherits them). The database and
    DAG folder are set too: a caller's own (the suite's, say) must not be used or migrated."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    home, url = work / "airflow", f"sqlite:///{work / 'zeus.db'}"
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "ZEUS_AIRFLOW_DB_URL": url,
        }
    )
    return work, url


def migrate_airflow(migrated: Path | None) -> None:
    """The bench home's metadata database: a copy of ``migrated`` when given, else migrated."""
    if migrated is not None:
        home = Path(os.environ["AIRFLOW_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(migrated) as source, sqlite3.connect(home / "airflow.db") as copy:
            source.backup(copy)
        return
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def timed_gets(url: str, headers: dict[str, str], requests: int) -> tuple[list[float], Any]:
    """``WARMUP + requests`` GETs of ``url``; the client's milliseconds of the last
    ``requests``, and the last answer."""
    import httpx

    client_ms = []
    for i in range(WARMUP + requests):
        started = time.perf_counter()
        answer = httpx.get(url, headers=headers, timeout=60)
        answer.raise_for_status()
        if i >= WARMUP:
            client_ms.append((time.perf_counter() - started) * 1e3)
    return client_ms, answer


def server_times_ms(log: str, path: str) -> list[float]:
    pattern = re.compile(r"duration_us=(\d+).*?method=GET path=(\S+)")
    return [int(us) / 1000 for us, seen in pattern.findall(log) if seen == path]


def in_process_breakdown(runs: int, repeat: int = 5) -> dict[str, float]:
    """Median milliseconds of each stage of the page, without HTTP or the login, after a
    warm-up (store opened, template compiled)."""
    from zeus_airflow.plugins import queries, render
    from zeus_airflow.plugins.access import DagAccess
    from zeus_airflow.plugins.job_charts import job_charts
    from zeus_airflow.plugins.urls import Urls

    access = DagAccess(all_dags=True, dag_ids=frozenset())
    names = ("store reads", "charts", "runs page with logical dates", "template")
    samples: list[list[float]] = []
    for _ in range(repeat + 1):
        marks = [time.perf_counter()]
        detail = queries.job_detail(access, JOB_ID)
        marks.append(time.perf_counter())
        charts = job_charts(detail)
        marks.append(time.perf_counter())
        page = queries.run_page(detail.runs)
        marks.append(time.perf_counter())
        html = (
            render.environment()
            .get_template("job.html")
            .render(
                urls=Urls(""),
                assets=render.assets(),
                detail=detail,
                charts=charts,
                page=page,
                highlight=None,
                highlight_map_index=None,
                is_run=queries.is_run,
                version_param=None,
            )
        )  # as plugins/pages.py's job_page renders it
        marks.append(time.perf_counter())
        samples.append([(b - a) * 1e3 for a, b in pairwise(marks)])
    assert len(detail.runs) == runs and html
    return {name: statistics.median(s[i] for s in samples[1:]) for i, name in enumerate(names)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=30)
    add_workload_options(parser)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="30 runs, 3 requests, the target not checked: that the script runs "
        "(the suite runs it)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.requests = 30, 3

    work, url = bench_home("zeus-bench-ui-")
    fill_s = fill_store(url, args.runs, args.workload, args.traces)
    print(f"store: {args.runs} runs of {JOB_ID} ({args.workload}, replayed) in {fill_s:.1f} s")
    migrate_airflow(args.airflow_db)

    sys.path.insert(0, str(REPO / "tests"))
    from fixtures_ui import start_api_server, stop_process_group

    server = start_api_server(work, {"admin": "admin"}, {})
    try:
        path = f"/zeus/jobs/{JOB_ID}"
        headers = {"Authorization": f"Bearer {server.token('admin')}"}
        client_ms, answer = timed_gets(server.url + path, headers, args.requests)
        size = len(answer.content)
        time.sleep(0.5)  # the access log line is written after the response
        server_ms = server_times_ms(server.log_text(), path)[WARMUP:]
    finally:
        stop_process_group(server.process)
    assert len(server_ms) == args.requests, "access log lines missing"
    stages = in_process_breakdown(args.runs)
    report("job page", f"runs={args.runs}", server_ms, client_ms, size, stages)
    return 0 if statistics.median(server_ms) <= TARGET_MS or args.quick else 1


def report(
    page: str,
    count: str,
    server_ms: list[float],
    client_ms: list[float],
    size: int,
    stages: dict[str, Any],
    extra: str = "",
) -> None:
    """The figures, then the last line ``<count> server_p50_ms=... page_kb=...``."""

    def p95(values: list[float]) -> float:
        return sorted(values)[max(0, round(0.95 * len(values)) - 1)]

    print(
        f"{page}, {len(server_ms)} requests: server p50 {statistics.median(server_ms):.0f} "
        f"ms, p95 {p95(server_ms):.0f} ms, max {max(server_ms):.0f} ms; client p50 "
        f"{statistics.median(client_ms):.0f} ms; {size / 1024:.0f} KiB of HTML{extra}"
    )
    print("in process (median): " + ", ".join(f"{k} {v:.0f} ms" for k, v in stages.items()))
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"{count} server_p50_ms={statistics.median(server_ms):.1f} "
        f"server_p95_ms={p95(server_ms):.1f} page_kb={size / 1024:.0f}"
    )


if __name__ == "__main__":
    sys.exit(main())
