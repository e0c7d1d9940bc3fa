"""Real processes on one store, on SQLite and PostgreSQL: a killed worker's trial expires and
stops blocking the job; workers racing on one job lose and duplicate nothing."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

from fixtures_store import STORE_TRACES, job_config
from paths import REPO, TESTS

from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.decide.policy import ZeusPolicy
from zeus_airflow.core.domain import Decision, DeviceInfo, RecurrenceKey
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.base import TrialStart
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import decided_by

# A worker that starts one recurrence of the job, then trains forever (heartbeat every 0.1 s).
WORKER = """
import sys, time
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.store.base import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.common.traces import load_workload_trace
sys.path.insert(0, sys.argv[3])
from fixtures_store import job_config

trace = load_workload_trace(sys.argv[2], "v100", "cifar100")
engine = Engine(SQLStore(sys.argv[1]), ReplayGPU(trace), job_config(trace), seed=1,
                heartbeat_s=0.1)

def train(run):
    print("training", flush=True)
    while True:
        time.sleep(1)

engine.run_recurrence(train, RecurrenceKey("killed", "dag", "train"))
"""


def wait_for_line(process: subprocess.Popen[str], expected: str, timeout_s: float) -> None:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    assert ready, f"the worker did not print {expected!r} within {timeout_s} s"
    assert process.stdout.readline().strip() == expected


def test_a_killed_workers_trial_expires_and_stops_blocking_the_job(
    migrated_url: str, cifar_trace: WorkloadTrace
) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, migrated_url, str(STORE_TRACES), str(TESTS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_line(worker, "training", timeout_s=60)
        store = SQLStore(migrated_url, lease_s=1.0)
        (trial,) = list_trials(store)
        time.sleep(0.5)
        (later,) = list_trials(store)
        assert (later.status, later.heartbeat_at > trial.heartbeat_at) == ("running", True)
        os.kill(worker.pid, signal.SIGKILL)
        assert worker.wait(timeout=10) == -signal.SIGKILL
    finally:
        worker.kill()
    config = job_config(cifar_trace)
    job = store.register_job(config)
    device = DeviceInfo(later.gpu_model, 1, "replayed", tuple(cifar_trace.power_limits_w))

    def begin(run_id: str) -> TrialStart:
        return store.begin_trial(
            job, RecurrenceKey(run_id), 1, decided_by(ZeusPolicy()), device, frozenset()
        )

    # Within the lease the dead worker's trial still looks in flight...
    early = begin("early")
    assert early.decision.phase == "concurrent"
    time.sleep(1.2)
    store.heartbeat(early.trial_id)  # this one's worker is alive
    # ...after it, the trial expires and pruning explores its batch size again.
    assert begin("late").decision == Decision(config.default_batch_size, "pruning")
    assert {t.run_id: t.status for t in list_trials(store)} == {
        "killed": "expired",
        "early": "running",
        "late": "running",
    }
    store.engine.dispose()


def test_racing_workers_lose_and_duplicate_nothing(migrated_url: str) -> None:
    bench = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "store_concurrency.py"),
            "--db",
            migrated_url,
            "--workers",
            "4",
            "--runs",
            "4",
            "--traces",
            str(STORE_TRACES),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bench.returncode == 0, bench.stderr
    last = bench.stdout.strip().splitlines()[-1]
    found = re.fullmatch(
        r"trials=(\d+) lost=(\d+) duplicated=(\d+) stuck=(\d+) "
        r"decide_p50_ms=[\d.]+ decide_p99_ms=[\d.]+",
        last,
    )
    assert found, last
    trials, lost, duplicated, stuck = map(int, found.groups())
    assert trials >= 16 and (lost, duplicated, stuck) == (0, 0, 0)
