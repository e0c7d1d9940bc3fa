"""Books that cannot be poisoned (issue 48): a row no worker wrote (forged, a bad restore)
never ends a job's learning, on SQLite and PostgreSQL.

An energy or a cost beyond what the row's GPUs and host can spend in its time reads as
missing (``figures.power_bound``); books that still say something impossible are reported
once, by job, with the trials that weigh most and the command that drops them, the default
size runs meanwhile, and no try is ever marked invalid for them."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from fixtures_store import insert_trial, job_config
from sqlalchemy import select

from zeus_airflow.cli import main
from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.decide.policy import ZeusPolicy
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey, TrialRecord
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import jobs, trials
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining

JOB = "forged.job"
BEFORE, AFTER = 3, 3
"""Recurrences run before the rows are forged, and after."""


def forge(store: SQLStore, count: int, **figures: Any) -> list[int]:
    """``count`` rows no worker wrote: copies of the job's latest finished try in runs of their
    own, with ``figures``; their ids."""
    with store.transaction() as conn:
        latest = (
            conn.execute(
                select(trials)
                .join(jobs, jobs.c.id == trials.c.job_pk)
                .where(jobs.c.job_id == JOB, trials.c.status == "succeeded")
                .order_by(trials.c.id.desc())
            )
            .mappings()
            .first()
        )
    assert latest is not None
    row = {k: v for k, v in latest.items() if k not in ("id", "decision_seq", "job_pk")}
    for i in range(count):
        insert_trial(store, latest["job_pk"], **{**row, "run_id": f"forged-{i}", **figures})
    with store.transaction() as conn:  # the job's next decision comes after the forged rows
        conn.execute(
            jobs.update()
            .where(jobs.c.id == latest["job_pk"])
            .values(decisions=jobs.c.decisions + count)
        )
    return [t.id for t in list_trials(store, JOB) if t.run_id.startswith("forged-")]


def run_days(engine: Engine, train: ReplayTraining, days: range) -> None:
    for day in days:
        engine.run_recurrence(train, RecurrenceKey(f"day-{day}", "dag", "train"))


def later_tries(store: SQLStore) -> list[TrialRecord]:
    return [t for t in list_trials(store, JOB) if t.run_id in {f"day-{d}" for d in _AFTER}]


_AFTER = range(BEFORE, BEFORE + AFTER)


def job(store: SQLStore, trace: WorkloadTrace, *, fallback: bool = True) -> tuple[Engine, Any]:
    gpu = ReplayGPU(trace)
    config = job_config(trace, JOB, exploration_budget=0.1)
    engine = Engine(store, gpu, config, ZeusPolicy(fallback=fallback), seed=3, heartbeat_s=None)
    return engine, ReplayTraining(gpu, seed=3)


def assert_still_learning(store: SQLStore) -> None:
    """Every later try is judged, and its budget figure is a real one."""
    later = later_tries(store)
    assert len(later) >= AFTER
    assert [t.status for t in later if t.status == "invalid"] == []
    for t in later:
        left = t.budget_left_runs
        assert left is not None and math.isfinite(left) and abs(left) < 100, t


FORGED_ROWS = {
    # one try of 1e15 J, 1e9 s and 1e18 cost (issue 48: about -1e16 runs left after it)
    "one-huge-try": (1, dict(energy_j=1e15, time_s=1e9, cost=1e18)),
    # three explore rows at cost 1e17
    "three-explore-rows": (3, dict(phase="pruning", cost=1e17, default_cost=1e17)),
}


@pytest.mark.parametrize("case", FORGED_ROWS)
@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "fail_when_infeasible"])
def test_a_forged_row_reads_as_missing_and_the_job_keeps_learning(
    sql_store: SQLStore, cifar_trace: WorkloadTrace, case: str, fallback: bool
) -> None:
    engine, train = job(sql_store, cifar_trace, fallback=fallback)
    run_days(engine, train, range(BEFORE))
    count, figures = FORGED_ROWS[case]
    forge(sql_store, count, **figures)
    run_days(engine, train, _AFTER)
    assert_still_learning(sql_store)


def test_impossible_books_are_reported_once_and_the_default_size_runs(
    sql_store: SQLStore,
    migrated_url: str,
    cifar_trace: WorkloadTrace,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Rows within every figure's bounds (three years of a GPU each) that still take the books
    to a budget no capped try can reach: named once with the rows and the command, the
    default size runs, nothing is invalid; dropping the rows repairs the books."""
    engine, train = job(sql_store, cifar_trace)
    run_days(engine, train, range(BEFORE))
    forged = forge(
        sql_store, 3, phase="exploit", observed=False, time_s=1e8, energy_j=1e11, cost=1e11
    )
    with caplog.at_level(logging.WARNING, logger="zeus_airflow"):
        run_days(engine, train, _AFTER)
    notices = [r.getMessage() for r in caplog.records if "books cannot be right" in r.getMessage()]
    assert len(notices) == 1, notices
    (notice,) = notices
    assert f"job '{JOB}'" in notice and "no capped try overruns that far" in notice
    drop = f"zeus-airflow drop-trials --job {JOB} " + " ".join(f"--trial {i}" for i in forged)
    assert drop in notice
    later = later_tries(sql_store)
    assert {t.batch_size for t in later} == {cifar_trace.default_batch_size}
    assert [t for t in later if t.status == "invalid" or t.budget_left_runs is not None] == []

    args = ["drop-trials", "--db", migrated_url, "--job", JOB, "--yes"]
    assert main([*args, *(a for i in forged for a in ("--trial", str(i)))]) == 0
    caplog.clear()
    run_days(engine, train, range(BEFORE + AFTER, BEFORE + AFTER + 1))
    assert not [r for r in caplog.records if "books cannot be right" in r.getMessage()]
    (last,) = [t for t in list_trials(sql_store, JOB) if t.run_id == f"day-{BEFORE + AFTER}"]
    assert last.budget_left_runs is not None and last.status != "invalid"


def test_forged_walk_steps_out_of_order_fall_back_to_the_default_size(
    sql_store: SQLStore, cifar_trace: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    """Explore rows of plausible figures that the walk cannot have made (a size out of its
    order): every later run trains the default size as without Zeus, says why and how to
    repair, and none fails or is invalid."""
    engine, train = job(sql_store, cifar_trace)
    run_days(engine, train, range(BEFORE))
    forge(sql_store, 2, phase="pruning")  # copies of the latest try: its size, again
    with caplog.at_level(logging.WARNING, logger="zeus_airflow"):
        run_days(engine, train, _AFTER)
    later = later_tries(sql_store)
    b0 = cifar_trace.default_batch_size
    assert {(t.batch_size, t.phase) for t in later} == {(b0, "fallback")}
    assert [t for t in later if t.status in ("invalid", "error")] == []
    assert f"zeus-airflow drop-trials --job {JOB} --trial N" in caplog.text
    assert "exploration history out of order" in caplog.text


def test_a_measured_try_longer_than_its_own_wall_clock_reads_as_missing(
    sql_store: SQLStore, cifar_trace: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    """The three rows above, as measured tries: 1e8 s each cannot fit in their rows' own
    start-to-finish spans (a replayed try's, milliseconds), so their figures read as
    missing and the books stay right: no notice, every later try priced by the budget.
    (Replayed, as above, their time is virtual and stands: the books' own check names them.)"""
    engine, train = job(sql_store, cifar_trace)
    run_days(engine, train, range(BEFORE))
    forged = forge(
        sql_store,
        3,
        phase="exploit",
        observed=False,
        time_s=1e8,
        energy_j=1e11,
        cost=1e11,
        measurement="measured",
    )
    with caplog.at_level(logging.WARNING, logger="zeus_airflow"):
        run_days(engine, train, _AFTER)
    assert not [r for r in caplog.records if "books cannot be right" in r.getMessage()]
    assert_still_learning(sql_store)
    with sql_store.transaction() as conn:
        job_pk = conn.execute(select(jobs.c.id).where(jobs.c.job_id == JOB)).scalar_one()
    with sql_store.reader() as reader:
        shown = {t.run_id: t.time_s for t in reader.shown_tries(job_pk, ("run_id", "time_s"))}
    assert [shown[f"forged-{i}"] for i in range(len(forged))] == [None, None, None]
    assert all(shown[f"day-{d}"] is not None for d in _AFTER)
