"""What the framework tests share: one try wired as the engine wires it, on a fake NVML GPU.

A fake A40 (100..300 W, found at 250 W) on the real clock: the frameworks really train on
the CPU, and the fake's NVML log shows which limits were set and that the original came back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.domain import RecurrenceKey, RunOutcome, TrialRecord
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.run import TrainingRun, open_run
from zeus_airflow.testing import FakeGPUSpec, FakeNVML

ORIGINAL_W = 250
WARMUP_STEPS, PROFILE_STEPS = 1, 1
"""One warm-up and one measured step per limit, by steps only (the CPU's steps take ms):
the A40's 9 limits take 18 steps at most."""
CANDIDATES = 9


@dataclass
class Try:
    outcome: RunOutcome | None
    run: TrainingRun
    fake: FakeNVML
    returned: Any = None

    def limits_set_w(self) -> list[int]:
        return [mw // 1000 for _, mw in self.fake.allowed_sets()]


def job(
    batch_sizes: tuple[int, ...] = (8, 16),
    *,
    target: float = 2.0,
    max_epochs: int = 3,
    higher_is_better: bool = True,
) -> JobConfig:
    """A job whose default target (2.0, an accuracy) is never reached."""
    return JobConfig(
        "frameworks.test",
        batch_sizes,
        batch_sizes[-1],
        target_metric=target,
        max_epochs=max_epochs,
        higher_is_better=higher_is_better,
        profiler=ProfilerConfig(
            warmup_steps=WARMUP_STEPS, profile_steps=PROFILE_STEPS, warmup_s=0.0, profile_s=0.0
        ),
    )


def one_try(
    train: Callable[[TrainingRun], Any],
    config: JobConfig,
    batch_size: int,
    *,
    early_stop_cost: float | None = None,
) -> Try:
    """``train(run)`` as the engine runs one try (``open_run``: the limits are put back on
    every exit path). An exception propagates after the restore, with the try (for its fake
    GPU) attached as ``err.zeus_try``."""
    fake = FakeNVML(1, FakeGPUSpec(default_limit_mw=ORIGINAL_W * 1000))
    gpus = NVMLGPUs(nvml=fake)
    attempt: Try | None = None
    try:
        with open_run(config, batch_size, gpus, early_stop_cost=early_stop_cost) as run:
            attempt = Try(None, run, fake)
            attempt.returned = train(run)
            attempt.outcome = run.finish()
    except BaseException as err:
        err.zeus_try = attempt  # type: ignore[attr-defined]
        raise
    finally:
        gpus.close()
    return attempt


def one_recurrence(
    train: Callable[[TrainingRun], Any], config: JobConfig
) -> tuple[RecurrenceResult, list[TrialRecord], FakeNVML]:
    """``train`` as a task runs it: the real engine (every try it makes) on a fake GPU and
    an in-memory store; the result, the stored trials and the fake."""
    fake = FakeNVML(1, FakeGPUSpec(default_limit_mw=ORIGINAL_W * 1000))
    gpus = NVMLGPUs(nvml=fake)
    store = SQLStore.in_memory()
    try:
        engine = Engine(store, gpus, config, seed=1, heartbeat_s=None)
        result = engine.run_recurrence(train, RecurrenceKey("day1"))
    finally:
        gpus.close()
    return result, list_trials(store), fake
