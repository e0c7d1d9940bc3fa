"""A job too short to profile within a run is told so once, with the reason and the fix;
later runs say only how far the profile got. "Once" is read from the store (the profile it
holds), so it holds across task instances: each recurrence here is a fresh engine."""

from __future__ import annotations

import logging

import pytest
from fixtures_airflow import TRACES

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.operators.summary import summary_line

EXPLAINED = "power profile cannot finish within a run"
SHORT = ProfilerConfig(warmup_steps=10, profile_steps=1_000)
"""Slices of several epochs (a replayed epoch has 49 steps here): the profile spans several
runs."""


@pytest.fixture(scope="module")
def cifar() -> WorkloadTrace:
    return load_workload_trace(TRACES, "v100", "cifar100")


class StandIn(ReplayGPU):
    """The paper's traces standing in for a measured GPU: a replayed one says its short
    profile at INFO only (its steps are the traces', nothing the user tunes)."""

    measurement = "measured"


def recurrences(
    store: SQLStore, trace: WorkloadTrace, count: int, profiler: ProfilerConfig
) -> list[RecurrenceResult]:
    """``count`` recurrences of a job fixed at its default size, each by an engine of its
    own, as each task instance is."""
    w = trace.workload
    b0 = trace.default_batch_size
    config = JobConfig(
        "short.train", (b0,), b0, w.target_metric, w.max_epochs, w.higher_is_better,
        profiler=profiler,
    )  # fmt: skip
    results = []
    for i in range(count):
        gpu = StandIn(trace)
        engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
        results.append(engine.run_recurrence(ReplayTraining(gpu, seed=1), RecurrenceKey(f"r{i}")))
    return results


def test_a_job_too_short_to_profile_is_told_once_with_the_reason_and_the_fix(
    cifar: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zeus_airflow")
    results = recurrences(SQLStore.in_memory(), cifar, 6, SHORT)
    unfinished = [r for r in results if r.profile_unfinished]
    assert len(unfinished) >= 3  # the profile spans runs
    said = [r for r in caplog.records if EXPLAINED in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    text = said[0].getMessage()
    first = results[0]
    assert first.profile_progress is not None
    # The reason, in numbers: what the run trained against what the profile takes.
    assert f"this run trained {first.final.outcome.steps} steps" not in text  # time first
    assert f"({first.final.outcome.steps} steps)" in text
    assert f"at each of up to {first.profile_progress.at_most} limits" in text
    # The fix, by the operator's own parameter names.
    for name in ("warmup_s=", "profile_s=", "warmup_steps=10", "profile_steps=1000"):
        assert name in text
    assert "train longer per run" in text and "power_limit_mode='measure'" in text
    # Later runs: only how far it got, the count rising.
    later = [
        r.getMessage() for r in caplog.records if "power profile continues (" in r.getMessage()
    ]
    assert len(later) == len(unfinished) - 1
    counts = [r.profile_progress.measured for r in unfinished if r.profile_progress]
    assert counts == sorted(counts) and counts[-1] > counts[0]
    assert all(f"of up to {first.profile_progress.at_most} limits measured" in m for m in later)
    for result in unfinished:
        assert "power profile continues next run (" in summary_line(result)
        assert "goes on next run" not in summary_line(result)


def test_a_job_that_profiles_within_a_run_is_told_nothing(
    cifar: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zeus_airflow")
    results = recurrences(SQLStore.in_memory(), cifar, 2, ProfilerConfig())
    assert not any(r.profile_unfinished for r in results)
    assert not any("power profile" in r.getMessage() for r in caplog.records)


def test_a_profile_that_gets_nowhere_says_why_on_each_run(
    cifar: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    """A warm-up longer than an epoch starts again at every epoch's end: nothing is ever
    measured, and every run says so (the profile's state, in the store, never moves)."""
    caplog.set_level(logging.INFO, logger="zeus_airflow")
    recurrences(SQLStore.in_memory(), cifar, 2, ProfilerConfig(warmup_steps=60))
    stuck = [r for r in caplog.records if "made no progress this run" in r.getMessage()]
    assert len(stuck) == 2 and "epochs had about 49 steps" in stuck[0].getMessage()
    assert not any(EXPLAINED in r.getMessage() for r in caplog.records)
