"""What tests/operators/test_celery_topology.py and its DAG file share: names, and a file barrier.

The barrier makes the test's DAG runs overlap for certain: each run's train function marks
its run as training, then waits until every expected run is. A worker that ran the tasks one
after the other would time out here instead of passing by luck.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DAG_ID = "zeus_celery_replay"
BARRIER_ENV = "ZEUS_CI_BARRIER_DIR"
"""An empty folder; each run drops a file in it."""
PARTIES_ENV = "ZEUS_CI_BARRIER_PARTIES"
"""How many runs must be training before any goes on."""
BARRIER_TIMEOUT_S = 60.0


def wait_for_other_runs(run_id: str) -> None:
    barrier = Path(os.environ[BARRIER_ENV])
    (barrier / run_id.replace("/", "_")).touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while len(list(barrier.iterdir())) < int(os.environ[PARTIES_ENV]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id}: the other runs never started training")
        time.sleep(0.1)
