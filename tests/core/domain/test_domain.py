"""The domain's facts: a trial's allowed status changes (and that the store makes no other),
and the one trial record the reports' runs are read by."""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any, get_args

import pydantic
import pytest

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.domain import (
    FIGURES,
    TRANSITIONS,
    DeviceInfo,
    JobState,
    RecurrenceKey,
    RunOutcome,
    TrainingFigures,
    TrialRecord,
    TrialStatus,
    may_become,
    takes_result,
)
from zeus_airflow.core.domain.decision import Decision
from zeus_airflow.core.domain.phases import Phase
from zeus_airflow.core.reports import RunRecord
from zeus_airflow.core.reports.records import attribute_docstrings
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore

DEVICE = DeviceInfo("GPU", 1, "measured", (250,))
LONG_S, SHORT_S = 3600.0, 0.005
"""Heartbeat intervals: a trial that stays running, and one that expires at once."""


def test_the_transition_table() -> None:
    assert dict(TRANSITIONS) == {
        "running": {"succeeded", "failed", "error", "invalid", "skipped", "expired", "abandoned"},
        "succeeded": {"succeeded", "failed", "superseded"},
        "failed": {"succeeded", "failed", "superseded"},
        "expired": {"succeeded", "failed", "invalid", "abandoned"},
    }
    final = set(get_args(TrialStatus)) - set(TRANSITIONS)
    assert final == {"error", "invalid", "skipped", "superseded", "abandoned"}
    assert may_become("expired", "succeeded") and not may_become("superseded", "succeeded")
    assert not may_become("error", "running")


def test_a_late_result_is_taken_unless_the_trial_was_an_exploration_step() -> None:
    assert takes_result("running", "pruning") and takes_result("failed", "pruning")
    assert takes_result("expired", "sampling") and not takes_result("expired", "pruning")
    assert not takes_result("abandoned", "sampling") and not takes_result("error", "sampling")


class Trials:
    """Trials of one job in a real store, each its own Airflow task instance, whose every
    status change is checked against the table as it happens."""

    def __init__(self) -> None:
        self.store = SQLStore.in_memory()
        self.job = self.store.register_job(JobConfig("job", (8, 16), 8, 1.0, 5))
        self.seen: dict[int, TrialStatus] = {}
        self.moves: set[tuple[str, str]] = set()

    def begin(
        self, name: str, phase: Phase = "sampling", try_number: int = 1, heartbeat_s: float = LONG_S
    ) -> int:
        def decide(state: JobState, rng: Any) -> Decision:
            return Decision(8, phase)

        start = self.store.begin_trial(
            self.job,
            RecurrenceKey(name, "dag", "t", -1, try_number),
            1,
            decide,
            DEVICE,
            frozenset(),
            heartbeat_s,
        )
        self.check()
        return start.trial_id

    def check(self) -> None:
        for trial in list_trials(self.store):
            before = self.seen.get(trial.id)
            if before is None:
                assert trial.status == "running"
            elif before != trial.status:
                assert may_become(before, trial.status), (before, trial.status)
                self.moves.add((before, trial.status))
            self.seen[trial.id] = trial.status

    def status(self, trial_id: int) -> str:
        return self.seen[trial_id]

    def finish(self, trial_id: int, reached: bool) -> None:
        self.store.finish_trial(trial_id, outcome(reached), observed=True)
        self.check()

    def invalidate(self, trial_id: int) -> None:
        self.store.invalidate_trial(trial_id, outcome(True), "broke its contract")
        self.check()

    def fail(self, trial_id: int, *, skipped: bool = False) -> None:
        self.store.fail_trial(trial_id, "raised", skipped=skipped)
        self.check()

    def expire(self) -> None:
        """Trials begun with SHORT_S heartbeats expire at the next decision."""
        time.sleep(4 * SHORT_S)
        self.begin(f"tick-{time.monotonic_ns()}")


def outcome(reached: bool) -> RunOutcome:
    return RunOutcome(
        8, 250, 10.0, 1.0, 10.0, 1, reached, "target" if reached else "max_epochs", None
    )


def test_the_store_moves_a_trial_only_as_the_table_allows() -> None:
    t = Trials()
    twice = t.begin("twice")
    t.finish(twice, True)
    t.finish(twice, False)  # recorded again: replaced
    t.finish(twice, True)
    t.begin("twice", try_number=2)  # a later Airflow try: the first is history
    missed = t.begin("missed")
    t.finish(missed, False)
    t.begin("missed", try_number=2)
    t.fail(t.begin("raises"))
    t.fail(t.begin("skips"), skipped=True)
    t.invalidate(t.begin("broken"))
    gone = t.begin("gone")
    t.begin("gone", try_number=2)  # the first never finished
    late = {
        name: t.begin(name, heartbeat_s=SHORT_S)
        for name in ("late-ok", "late-miss", "late-broken", "late-gone", "late-step")
    }
    step = t.begin("late-step-2", phase="pruning", heartbeat_s=SHORT_S)
    t.expire()
    assert {t.status(i) for i in (*late.values(), step)} == {"expired"}
    t.finish(late["late-ok"], True)
    t.finish(late["late-miss"], False)
    t.invalidate(late["late-broken"])
    t.begin("late-gone", try_number=2)
    t.finish(step, True)  # an exploration step's late result is not taken
    assert t.status(step) == "expired" and t.status(gone) == "abandoned"
    t.fail(twice)  # a finished trial's error changes nothing
    every_move = {(old, new) for old, news in TRANSITIONS.items() for new in news if old != new}
    assert t.moves == every_move


def test_a_run_is_read_by_the_trial_records_field_names() -> None:
    """RunRecord shows a run in the JSON API with documented fields: each one but those a run
    computes is a trial's field of the same type (figures optional, as a trial's are)."""
    trial = {f.name: f.type for f in fields(TrialRecord)}
    own = {"index", "batch_sizes", "capped_sizes"}
    for f in fields(RunRecord):
        if f.name in own:
            continue
        assert f.name in trial, f"RunRecord.{f.name} is no trial field"
        assert f.type == trial[f.name], f.name
    assert set(FIGURES) <= set(trial)


def test_a_runs_inherited_figures_are_documented_where_they_are_declared() -> None:
    schema = pydantic.TypeAdapter(RunRecord).json_schema()["properties"]
    declared = attribute_docstrings(TrainingFigures)
    assert {"power_limit_w", "cost"} <= set(declared)
    for name, doc in declared.items():
        assert schema[name]["description"] == doc, name
    assert schema["index"]["description"] == attribute_docstrings(RunRecord)["index"]


@pytest.mark.parametrize("status", get_args(TrialStatus))
def test_every_status_has_a_place(status: str) -> None:
    from zeus_airflow.core.domain import LIVE_STATUSES, REPLACED_STATUSES, VOID_STATUSES

    assert [status in group for group in (LIVE_STATUSES, VOID_STATUSES, REPLACED_STATUSES)].count(
        True
    ) == 1


def _row(try_number: int, batch_size: int, status: str, energy_j: float | None) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        dag_id="d",
        task_id="t",
        run_id="r",
        map_index=-1,
        try_number=try_number,
        batch_size=batch_size,
        status=status,
        measurement="replayed",
        energy_j=energy_j,
        time_s=None if energy_j is None else energy_j / 100,
        setup_energy_j=None if energy_j is None else 10.0,
        setup_time_s=None if energy_j is None else 1.0,
    )


def test_a_run_is_its_task_instance_s_tries_from_its_latest_airflow_try() -> None:
    """``domain.group_runs``: an Airflow retry starts the run over; ``finished_run``: its
    figures by ``run_of``, its batch size the last try's, the first kept for planning."""
    from zeus_airflow.core.domain import (
        energy_with_setup_j,
        finished_run,
        group_runs,
        time_with_setup_s,
    )

    history = [_row(1, 8, "error", None), _row(2, 32, "failed", 400.0)]
    retried = [*history, _row(2, 64, "succeeded", 600.0)]
    (run,) = group_runs(retried)
    assert [t.batch_size for t in run] == [32, 64]
    past = finished_run(run)
    assert past is not None
    assert (past.batch_size, past.first_batch_size) == (64, 32)
    assert (past.energy_j, past.time_s, past.setup_energy_j) == (1000.0, 10.0, 20.0)
    assert (energy_with_setup_j(past), time_with_setup_s(past)) == (1020.0, 12.0)
    assert finished_run([_row(1, 8, "running", None)]) is None
