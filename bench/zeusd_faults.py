"""What a zeusd that hangs, or is not there, costs a task (issue 38).

Before: a daemon that accepted and never answered held a task 122 s for 0.5 s of training,
and the stall was counted in the try (70.6 s, 18.6 kJ); a daemon that was not running when
the task started failed it. This runs the engine (profiling, leases) through the fake zeusd,
a real HTTP server, over a fake GPU on the real clock (a fake A100 at 400 W drawing 90 %), for
about ``--steps`` × 10 ms of training, three ways:

- ``healthy``: the daemon answers throughout;
- ``hang``: from the middle of training on it accepts and never answers (released after the
  run, before the task puts its limit back);
- ``unreachable``: nothing listens at its socket when the task starts (the task reads the
  GPU through NVML instead: the fake NVML here).

    PYTHONPATH=. .venv/bin/python bench/zeusd_faults.py            # deadline 2 s (default)
    PYTHONPATH=. .venv/bin/python bench/zeusd_faults.py --quick    # deadline 0.3 s, 20 steps

The GPU is a fake (``FakeNVML``): its energy is the fake's power model, labelled as such.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.devices import nvml
from zeus_airflow.core.devices.backends import local_readers
from zeus_airflow.core.devices.measure_only import open_zeusd_or_measure
from zeus_airflow.core.devices.zeusd import ZeusdGPUs
from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint
from zeus_airflow.core.store.base import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import A100_SXM4, FakeNVML, FakeZeusd

A100 = replace(A100_SXM4, default_limit_mw=400_000)
JOB = JobConfig(
    "bench",
    (32,),
    32,
    target_metric=1.0,
    max_epochs=1,
    exploration_budget=None,
    profiler=ProfilerConfig(warmup_steps=1, profile_steps=2, warmup_s=0.0, profile_s=0.0),
)


def train_for(steps: int, at_half: Any = None) -> Any:
    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for step in run.steps(range(steps)):
                time.sleep(0.01)
                if step == steps // 2 and at_half is not None:
                    at_half()
            run.report_metric(1.0)

    return train


def one_run(folder: Path, way: str, steps: int, deadline_s: float) -> dict[str, Any]:
    store = SQLStore(f"sqlite:///{folder}/{way}.db", create_schema=True)
    fake = FakeNVML(1, A100)
    sock = folder / f"{way}.sock"
    endpoint = ZeusdEndpoint(socket_path=str(sock), timeout_s=deadline_s)
    with FakeZeusd(sock, fake) as daemon:
        started_s = time.monotonic()
        if way == "unreachable":
            daemon.stop()  # the task's own NVML reads the GPU: the fake NVML, in this process
            real = nvml.NVMLGPUs
            nvml.NVMLGPUs = functools.partial(real, nvml=fake)  # type: ignore[misc]
            os.environ["ZEUSD_SOCK_PATH"] = str(sock)
            try:
                gpus: Any = open_zeusd_or_measure(None, local_readers())
            finally:
                nvml.NVMLGPUs = real  # type: ignore[misc]
        else:
            gpus = ZeusdGPUs((0,), endpoint=endpoint)
        hang = daemon.hang if way == "hang" else None
        with PowerLimitGuard(gpus, GPULeases(store), logging.getLogger("bench")) as guard:
            result = Engine(store, guard.gpus, JOB, seed=1, heartbeat_s=None).run_recurrence(
                train_for(steps, hang), RecurrenceKey(way)
            )
            trained_s = time.monotonic() - started_s
            daemon.release()
        task_s = time.monotonic() - started_s
    client = getattr(gpus, "client", None)
    return {
        "way": way,
        "task_s": task_s,
        "until_trained_s": trained_s,
        "try_time_s": result.time_s,
        "try_energy_j": result.energy_j,
        "stalled_s": client.stalled_s() if client is not None else 0.0,
        "power_control": result.final.outcome.power_control,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.3 s deadline, 20 steps")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--deadline-s", type=float, default=2.0)
    args = parser.parse_args()
    steps, deadline_s = (20, 0.3) if args.quick else (args.steps, args.deadline_s)
    logging.basicConfig(level=logging.ERROR)
    print(f"fake A100 (FakeNVML), {steps} steps of 10 ms, zeusd deadline {deadline_s:g} s")
    print(
        "| way | task wall s | until trained s | try time s | try energy J (fake GPU) "
        "| stalled s | power_control |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for way in ("healthy", "hang", "unreachable"):
            r = one_run(Path(scratch), way, steps, deadline_s)
            print(
                f"| {r['way']} | {r['task_s']:.2f} | {r['until_trained_s']:.2f} | "
                f"{r['try_time_s']:.2f} | {r['try_energy_j']:.0f} | {r['stalled_s']:.2f} | "
                f"{r['power_control']} |"
            )


if __name__ == "__main__":
    main()
