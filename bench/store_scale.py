"""Deciding and recording one recurrence in a big store: 10,000 jobs x 100 trials.

The store is filled with copies of a real job's history (the engine's first ``--trials``
trials of a replayed paper workload, with their power profiles), one copy per job. Then, for
``--samples`` random jobs, the real Engine runs one recurrence on a replay GPU and every store
call it makes is timed: registering the job, deciding (``begin_trial``), loading the power
profile, recording the result. The query plans of a decision are printed and checked: each
statement reaches the job's rows through an index, never by scanning the table.

The last line is ``jobs=<n> trials=<n> samples=<n> recurrence_p50_ms=<x>
recurrence_p99_ms=<x> decide_p50_ms=<x> decide_p99_ms=<x> plans=<indexed|SCANS>``.

    python bench/store_scale.py --db postgresql+psycopg://postgres@127.0.0.1/zeus_scale
    python bench/store_scale.py --db sqlite:////tmp/zeus_scale.db --window-size 10

A filled store is reused by later runs with the same shape (the jobs are named after it).
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, delete, event, func, insert, select, text

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.decide.policy import ZeusPolicy
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.location import upgrade_store
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import jobs, power_profiles, trials
from zeus_airflow.core.train.engine import Engine, decided_by
from zeus_airflow.core.train.replay_training import ReplayTraining

DEFAULT_TRACES = resolve_traces_dir()
TIMED = (
    "register_job",
    "begin_trial",
    "load_profile",
    "save_profile",
    "finish_trial",
    "fail_trial",
)
JOBS_PER_CHUNK = 500


class TimedStore(SQLStore):
    """The real store, timing every call the engine makes, in seconds, by method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spent_s: dict[str, list[float]] = defaultdict(list)
        for name in TIMED:
            setattr(self, name, self._timed(name, getattr(self, name)))

    def _timed(self, name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.spent_s[name].append(time.perf_counter() - started)

        return call

    def total_s(self) -> float:
        return sum(sum(v) for v in self.spent_s.values())


def job_config(trace: WorkloadTrace, job_id: str, window_size: int | None) -> JobConfig:
    w = trace.workload
    return JobConfig(
        job_id,
        trace.batch_sizes,
        trace.default_batch_size,
        w.target_metric,
        w.max_epochs,
        w.higher_is_better,
        window_size=window_size,
    )


def template_history(
    trace: WorkloadTrace, config: JobConfig, count: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first ``count`` trials of a real run of the job, and its power profiles."""
    store, gpu = SQLStore.in_memory(), ReplayGPU(trace)
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
    train, run = ReplayTraining(gpu, seed=1), 0
    while _count(store, trials) < count:
        engine.run_recurrence(train, RecurrenceKey(f"r{run:05d}", "bench", "train"))
        run += 1
    with store.reading() as conn:
        rows = [
            dict(r)
            for r in conn.execute(select(trials).order_by(trials.c.id).limit(count)).mappings()
        ]
        profiles = [dict(r) for r in conn.execute(select(power_profiles)).mappings()]
    for row in (*rows, *profiles):
        del row["id"], row["job_pk"]
    return rows, profiles


def fill(store: SQLStore, trace: WorkloadTrace, prefix: str, args: argparse.Namespace) -> None:
    """Make the store hold exactly ``args.jobs`` jobs named ``prefix.<i>`` with
    ``args.trials`` trials each (kept from an earlier run when already there)."""
    with store.reading() as conn:
        existing = conn.execute(
            select(func.count()).where(jobs.c.job_id.like(f"{prefix}.%"))
        ).scalar_one()
    if existing == args.jobs:
        print(f"reusing the {existing} jobs {prefix}.* already in the store")
        return
    started = time.perf_counter()
    config = job_config(trace, "template", args.window_size)
    rows, profiles = template_history(trace, config, args.trials)
    with store.transaction() as conn:
        conn.execute(delete(jobs).where(jobs.c.job_id.like(f"{prefix}.%")))
    for first in range(0, args.jobs, JOBS_PER_CHUNK):
        with store.transaction() as conn:
            _fill_chunk(
                conn,
                config,
                prefix,
                range(first, min(first + JOBS_PER_CHUNK, args.jobs)),
                rows,
                profiles,
            )
    with store.transaction() as conn:
        conn.execute(text("ANALYZE"))
    print(f"filled {args.jobs} jobs x {len(rows)} trials in {time.perf_counter() - started:.0f} s")


def _fill_chunk(
    conn: Connection,
    config: JobConfig,
    prefix: str,
    numbers: range,
    rows: list[dict[str, Any]],
    profiles: list[dict[str, Any]],
) -> None:
    decisions = max(r["decision_seq"] for r in rows)
    created = rows[0]["started_at"]
    pks = (
        conn.execute(
            insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True),
            [
                dict(
                    job_id=f"{prefix}.{i}",
                    version=1,
                    fingerprint=config.fingerprint(),
                    config_json=_config_json(config, f"{prefix}.{i}"),
                    seed=i,
                    decisions=decisions,
                    active=True,
                    created_at=created,
                )
                for i in numbers
            ],
        )
        .scalars()
        .all()
    )
    # Each job has its own DAG runs, as in a real deployment.
    conn.execute(
        insert(trials),
        [dict(row, job_pk=pk, run_id=f"{row['run_id']}-{pk}") for pk in pks for row in rows],
    )
    conn.execute(insert(power_profiles), [dict(p, job_pk=pk) for pk in pks for p in profiles])


def _config_json(config: JobConfig, job_id: str) -> str:
    return JobConfig(**{**config.__dict__, "job_id": job_id}).to_json()


def _count(store: SQLStore, table: Any) -> int:
    with store.reading() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def measure(
    store: TimedStore, trace: WorkloadTrace, prefix: str, args: argparse.Namespace
) -> list[float]:
    """Per sampled job, the store's time for one recurrence (``store.spent_s`` has each
    call's)."""
    recurrence_s: list[float] = []
    for number in random.Random(args.seed).sample(range(args.jobs), args.samples):
        gpu = ReplayGPU(trace)
        config = job_config(trace, f"{prefix}.{number}", args.window_size)
        engine = Engine(store, gpu, config, heartbeat_s=None)
        before = store.total_s()
        engine.run_recurrence(
            ReplayTraining(gpu, seed=number),
            RecurrenceKey(f"scale-{time.time_ns()}", "bench", "train"),
        )
        recurrence_s.append(store.total_s() - before)
    return recurrence_s


def decision_plans(
    store: SQLStore, trace: WorkloadTrace, prefix: str, args: argparse.Namespace
) -> list[tuple[str, str]]:
    """(statement, plan) of every statement one decision runs, on one of the big jobs."""
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        captured.append((statement, parameters))

    config = job_config(trace, f"{prefix}.0", args.window_size)
    job = store.register_job(config)
    gpu = ReplayGPU(trace)
    device = Engine(store, gpu, config).device_info
    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        start = store.begin_trial(
            job,
            RecurrenceKey(f"plan-{time.time_ns()}"),
            1,
            decided_by(ZeusPolicy()),
            device,
            frozenset(),
        )
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
    store.fail_trial(start.trial_id, "query-plan probe, not a training run")
    explain = "EXPLAIN QUERY PLAN " if store.engine.dialect.name == "sqlite" else "EXPLAIN "
    plans = []
    with store.reading() as conn:
        for statement, parameters in captured:
            if statement.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT")):
                rows = conn.exec_driver_sql(explain + statement, parameters).all()
                plans.append((statement, "\n".join(str(r[-1]) for r in rows)))
    return plans


def scans_table(plan: str) -> bool:
    """Whether a plan reads a whole table (SQLite ``SCAN``, PostgreSQL ``Seq Scan``)."""
    return any(
        line.strip().startswith("SCAN zeus_") or "Seq Scan on zeus_" in line
        for line in plan.splitlines()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="SQLAlchemy URL of the store")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=100, help="trials per job")
    parser.add_argument("--samples", type=int, default=300, help="recurrences measured")
    parser.add_argument("--window-size", type=int, default=None)
    parser.add_argument(
        "--traces",
        type=Path,
        default=DEFAULT_TRACES,
        help="default: $ZEUS_TRACES_DIR, else the traces shipped in the package",
    )
    parser.add_argument("--gpu", default="v100")
    parser.add_argument("--workload", default="cifar100")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="20 jobs x 20 trials, 5 samples: that the script runs (the suite runs it)",
    )
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.trials, args.samples = 20, 20, 5

    upgrade_store(args.db)
    trace = load_workload_trace(args.traces, args.gpu, args.workload)
    prefix = f"bench.scale.{args.gpu}.{args.workload}.w{args.window_size or 0}.t{args.trials}"
    store = TimedStore(args.db)
    fill(store, trace, prefix, args)
    plans = decision_plans(store, trace, prefix, args)
    for statement, plan in plans:
        print(f"--- {' '.join(statement.split())[:110]}\n{plan}")
    store.spent_s.clear()  # the probe above is not a sample
    recurrence_ms = np.array(measure(store, trace, prefix, args)) * 1000
    decide_ms = np.array(store.spent_s["begin_trial"]) * 1000
    # A try is decided, then recorded: the two calls pair up in order.
    try_ms = decide_ms + np.array(store.spent_s["finish_trial"]) * 1000
    print(
        f"{store.where}: store time per recurrence over {args.samples} random jobs "
        f"(window_size={args.window_size}); {_count(store, trials)} trials in the store; "
        f"{len(try_ms)} tries: decide + record p50 {np.percentile(try_ms, 50):.2f} ms, "
        f"p99 {np.percentile(try_ms, 99):.2f} ms"
    )
    print(
        f"jobs={args.jobs} trials={args.jobs * args.trials} samples={args.samples} "
        f"recurrence_p50_ms={np.percentile(recurrence_ms, 50):.2f} "
        f"recurrence_p99_ms={np.percentile(recurrence_ms, 99):.2f} "
        f"decide_p50_ms={np.percentile(decide_ms, 50):.2f} "
        f"decide_p99_ms={np.percentile(decide_ms, 99):.2f} "
        f"plans={'SCANS' if any(scans_table(p) for _, p in plans) else 'indexed'}"
    )


if __name__ == "__main__":
    main()
