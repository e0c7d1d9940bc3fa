"""Many workers, one job, one store: are decisions atomic and results kept exactly once?

N processes start together and each drives the real Engine on a replay GPU for ``--runs``
recurrences of the *same* job (distinct Airflow run ids, as overlapping DAG runs have). Then
the store is checked against what the workers were told:

* lost: a trial a worker finished that the store lacks or holds with other figures, a
  recurrence that raised, or a gap in the job's decision numbers;
* duplicated: a stored trial no worker reported (or reported twice);
* stuck: a trial still ``running`` (or ``expired``) after every worker has exited.

The last line is ``trials=<n> lost=<n> duplicated=<n> stuck=<n> decide_p50_ms=<x>
decide_p99_ms=<x>``, decide being ``begin_trial``: lock the job, read its snapshot, decide,
insert the trial.

    python bench/store_concurrency.py --db postgresql+psycopg://postgres@127.0.0.1/zeus_bench \\
        --workers 16 --runs 25
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import secrets
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.base import TrialStart
from zeus_airflow.core.store.location import upgrade_store
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import jobs
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining

DEFAULT_TRACES = resolve_traces_dir()


class TimedStore(SQLStore):
    """The real store, timing each decision (``begin_trial``) in seconds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decide_s: list[float] = []

    def begin_trial(self, *args: Any, **kwargs: Any) -> TrialStart:
        started = time.perf_counter()
        try:
            return super().begin_trial(*args, **kwargs)
        finally:
            self.decide_s.append(time.perf_counter() - started)


def job_config(trace: WorkloadTrace, job_id: str) -> JobConfig:
    w = trace.workload
    return JobConfig(
        job_id,
        trace.batch_sizes,
        trace.default_batch_size,
        w.target_metric,
        w.max_epochs,
        w.higher_is_better,
    )


def worker(index: int, args: argparse.Namespace, job_id: str, start: Any, results: Any) -> None:
    """One Airflow worker: ``args.runs`` recurrences, each reported back trial by trial."""
    # The engine's per-try warnings would drown the output; the store's retries stay visible.
    logging.getLogger("zeus_airflow").setLevel(logging.ERROR)
    logging.getLogger("zeus_airflow.core.store").setLevel(logging.WARNING)
    report: dict[str, Any] = {
        "worker": index,
        "trials": [],
        "completed": 0,
        "errors": [],
        "decide_s": [],
    }
    try:
        trace = load_workload_trace(args.traces, args.gpu, args.workload)
        store = TimedStore(args.db)
        gpu = ReplayGPU(trace)
        engine = Engine(
            store, gpu, job_config(trace, job_id), seed=args.seed, heartbeat_s=args.heartbeat_s
        )
        train = ReplayTraining(gpu, seed=args.seed * 1000 + index)
        start.wait()
        for run in range(args.runs):
            key = RecurrenceKey(run_id=f"w{index:02d}-r{run:03d}", dag_id="bench", task_id="train")
            try:
                result = engine.run_recurrence(train, key)
            except Exception:
                report["errors"].append(traceback.format_exc())
                continue
            report["trials"] += [
                (t.trial_id, t.phase, t.outcome.batch_size, t.outcome.cost) for t in result.tries
            ]
            report["completed"] += 1
        report["decide_s"] = store.decide_s
    except Exception:
        report["errors"].append(traceback.format_exc())
    results.put(report)


def run_workers(args: argparse.Namespace, job_id: str) -> list[dict[str, Any]]:
    context = mp.get_context("spawn")
    start, results = context.Barrier(args.workers), context.Queue()
    processes = [
        context.Process(target=worker, args=(i, args, job_id, start, results))
        for i in range(args.workers)
    ]
    for process in processes:
        process.start()
    reports = [results.get() for _ in processes]
    for process in processes:
        process.join()
    return reports


def audit(
    store: SQLStore, job_id: str, reports: list[dict[str, Any]], expected_runs: int
) -> dict[str, int]:
    """Compare the store with what the workers were told (see the module's docstring)."""
    stored = {t.id: t for t in list_trials(store, job_id)}
    told = Counter(trial_id for r in reports for trial_id, *_ in r["trials"])
    told_cost = {trial_id: cost for r in reports for trial_id, _, _, cost in r["trials"]}
    finished = {
        i
        for i, t in stored.items()
        if t.status in ("succeeded", "failed") and t.cost == told_cost.get(i)
    }
    with store.reading() as conn:
        decisions = conn.execute(jobs.select().where(jobs.c.job_id == job_id)).one().decisions
    seqs = sorted(t.decision_seq for t in stored.values())
    recurrences_failed = expected_runs - sum(r["completed"] for r in reports)
    return {
        "trials": len(stored),
        "lost": len(set(told) - finished)
        + recurrences_failed
        + len(set(range(1, decisions + 1)) - set(seqs)),
        "duplicated": sum(n - 1 for n in told.values())
        + len(set(stored) - set(told))
        + len(seqs)
        - len(set(seqs)),
        "stuck": sum(t.status in ("running", "expired") for t in stored.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="SQLAlchemy URL of the store")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--runs", type=int, default=25, help="recurrences per worker")
    parser.add_argument(
        "--traces",
        type=Path,
        default=DEFAULT_TRACES,
        help="default: $ZEUS_TRACES_DIR, else the traces shipped in the package",
    )
    parser.add_argument("--gpu", default="v100")
    parser.add_argument("--workload", default="cifar100")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--heartbeat-s", type=float, default=1.0)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 workers x 3 recurrences: that the script runs (the suite runs it)",
    )
    args = parser.parse_args()
    if args.quick:
        args.workers, args.runs = 2, 3

    upgrade_store(args.db)
    job_id = f"bench.concurrency.{secrets.token_hex(4)}"
    began = time.perf_counter()
    reports = run_workers(args, job_id)
    elapsed_s = time.perf_counter() - began
    for report in reports:
        for error in report["errors"][:1]:
            print(f"worker {report['worker']} failed:\n{error}")
    store = SQLStore(args.db)
    counts = audit(store, job_id, reports, args.workers * args.runs)
    decide_ms = np.array([s for r in reports for s in r["decide_s"]]) * 1000
    phases = Counter(phase for r in reports for _, phase, *_ in r["trials"])
    print(
        f"{store.where}: {args.workers} workers x {args.runs} recurrences of job {job_id} "
        f"({args.gpu} {args.workload}) in {elapsed_s:.1f} s; phases {dict(phases)}"
    )
    print(
        f"trials={counts['trials']} lost={counts['lost']} duplicated={counts['duplicated']} "
        f"stuck={counts['stuck']} decide_p50_ms={np.percentile(decide_ms, 50):.2f} "
        f"decide_p99_ms={np.percentile(decide_ms, 99):.2f}"
    )


if __name__ == "__main__":
    main()
