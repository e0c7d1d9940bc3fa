"""A trial's life: its statuses, the events that move it between them, and how it reads back.

Every status change the store makes is one of the events below; the store builds its SQL
statements from them (``core/store/sql.py``), so a transition this table does not allow cannot
happen, and ``TRANSITIONS`` is the whole state machine in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.domain.figures import TrainingFigures
from zeus_airflow.core.domain.phases import EXPLORATION_PHASES

TrialStatus = Literal[
    "running",
    "succeeded",
    "failed",
    "error",
    "invalid",
    "skipped",
    "expired",
    "superseded",
    "abandoned",
]
"""running: in flight. succeeded / failed: finished, target reached or not. error: the train
function raised. invalid: it returned without keeping its contract (run.CONTRACT), or kept it
without a verdict on its size (too few steps, its own cap); its measurement is kept, its batch
size not judged. skipped: the train function asked its scheduler to skip the task (Airflow's
AirflowSkipException); likewise kept, not judged. expired: no heartbeat within its lease (a
few missed heartbeats: its worker died). superseded: it had finished when a later try of the
same Airflow task instance began; abandoned: it had not. Both are kept for history and never
feed a posterior; a superseded exploration trial keeps its place in the pruning walk, which
later decisions were built on."""

STARTED: TrialStatus = "running"
"""The status a trial is inserted with."""
LIVE_STATUSES: tuple[TrialStatus, ...] = ("running", "succeeded", "failed", "expired")
"""Trials that count, or may still count, for their Airflow task instance's try."""
VOID_STATUSES: tuple[TrialStatus, ...] = ("error", "invalid", "skipped")
"""Tries that say nothing about their batch size: the train function raised (``error``),
returned without a verdict (``invalid``) or skipped its task (``skipped``). Shown, never
counted."""
SHOWN_STATUSES: tuple[TrialStatus, ...] = (*LIVE_STATUSES, *VOID_STATUSES)
"""Tries shown as part of a run: the live ones, and those whose train function raised or
broke its contract."""
REPLACED_STATUSES: tuple[TrialStatus, ...] = ("superseded", "abandoned")
"""Trials that a later try of the same Airflow task instance replaced: history only."""
FINISHED_STATUSES: tuple[TrialStatus, ...] = ("succeeded", "failed")
"""A result was recorded: the target was reached, or not."""
WALK_STATUSES: tuple[TrialStatus, ...] = ("succeeded", "failed", "superseded")
"""Exploration trials that are steps of the pruning walk: finished, even if superseded since."""


def finished_status(reached_target: bool) -> TrialStatus:
    return "succeeded" if reached_target else "failed"


STATUS_SHOWN: Mapping[TrialStatus, tuple[str, str]] = {
    "running": ("running", "in flight: the figures sum the tries finished so far"),
    "succeeded": ("succeeded", "the last try reached the target"),
    "failed": (
        "target missed",
        "the last try missed the target (at max_epochs or early-stopped): "
        "a warning, the Airflow task still succeeded unless fail_on_missed_target=True",
    ),
    "error": (
        "error",
        "the train function raised: the task failed with its traceback (task "
        "log); no batch size was judged",
    ),
    "invalid": (
        "invalid",
        "no batch size was judged: the train function broke its contract "
        "(no metric reported, nan, run.epochs() not iterated, or a return value XCom "
        "cannot store: the task failed with the reason in its log), or trained an "
        "epoch of no step, or its own cap (max_steps) ended it (a warning; the task "
        "succeeded)",
    ),
    "skipped": (
        "skipped",
        "the train function raised AirflowSkipException: the task was "
        "skipped; no batch size was judged",
    ),
    "expired": ("expired", "the task stopped sending heartbeats (killed?): recorded as lost"),
    "superseded": (
        "replaced",
        "a later Airflow try of the task began after it finished: history, never counted",
    ),
    "abandoned": (
        "abandoned",
        "a later Airflow try of the task began while it ran: history, never counted",
    ),
}
"""A try's or run's status as people read it (the UI's runs table, the CLI), and what it
means (the UI's tooltip). A trial's ``failed`` is its batch size missing the target; to a
reader it must not read as a failed Airflow task."""


# --- the events ---------------------------------------------------------------------------------
EXPIRE: Mapping[TrialStatus, TrialStatus] = {"running": "expired"}
"""Its worker sent no heartbeat within the lease."""
SUPERSEDE: Mapping[TrialStatus, TrialStatus] = {
    "succeeded": "superseded",
    "failed": "superseded",
    "running": "abandoned",
    "expired": "abandoned",
}
"""A later try of the same Airflow task instance began: live trials become history."""
FAIL: Mapping[TrialStatus, TrialStatus] = {"running": "error"}
"""The train function raised."""
SKIP: Mapping[TrialStatus, TrialStatus] = {"running": "skipped"}
"""The train function raised its scheduler's skip (Airflow's AirflowSkipException)."""
INVALIDATE: Mapping[TrialStatus, TrialStatus] = {"running": "invalid", "expired": "invalid"}
"""The train function returned without keeping its contract (a late one too)."""
RESULT_TAKEN_FROM: tuple[TrialStatus, ...] = ("running", "succeeded", "failed")
"""Statuses whose trial takes a result (``succeeded``/``failed``): recording one again
replaces it."""
LATE_RESULT_TAKEN_FROM: tuple[TrialStatus, ...] = ("expired",)
"""An expired trial's late result is taken too, unless the trial was an exploration step
(:data:`~zeus_airflow.core.domain.phases.EXPLORATION_PHASES`): its batch size has been
re-explored by another worker meanwhile, and the walk must not see it twice."""


def takes_result(status: str, phase: str) -> bool:
    """Whether a trial in ``status`` takes a finished result (see ``RESULT_TAKEN_FROM``)."""
    return status in RESULT_TAKEN_FROM or (
        status in LATE_RESULT_TAKEN_FROM and phase not in EXPLORATION_PHASES
    )


def _transitions() -> dict[TrialStatus, frozenset[TrialStatus]]:
    moves: dict[TrialStatus, set[TrialStatus]] = {}
    for event in (EXPIRE, SUPERSEDE, FAIL, SKIP, INVALIDATE):
        for old, new in event.items():
            moves.setdefault(old, set()).add(new)
    for old in (*RESULT_TAKEN_FROM, *LATE_RESULT_TAKEN_FROM):
        moves.setdefault(old, set()).update(FINISHED_STATUSES)
    return {old: frozenset(new) for old, new in moves.items()}


TRANSITIONS: Mapping[TrialStatus, frozenset[TrialStatus]] = _transitions()
"""Every status change a trial may make (a status missing here is final). ``succeeded`` and
``failed`` may become each other: recording a trial's result again replaces it."""


def may_become(old: TrialStatus, new: TrialStatus) -> bool:
    return new in TRANSITIONS.get(old, frozenset())


# --- reading ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecurrenceKey:
    """Identifies one recurrence: one Airflow task instance, and which try of it this is."""

    run_id: str
    dag_id: str = ""
    task_id: str = ""
    map_index: int = -1
    try_number: int = 1


@dataclass(frozen=True, kw_only=True)
class TrialRecord(TrainingFigures):
    """One trial as stored: the one record of a trial for reading (the CLI, the reports, the
    UI). Energy in J, time in s, power in W; figures None until finished."""

    id: int
    job_id: str
    version: int
    decision_seq: int
    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    attempt: int
    """Try of a batch size within the recurrence (1, 2, ... after a failed size)."""
    status: TrialStatus
    phase: str
    """Why it ran: its decision's phase (``domain.phases.Phase``)."""
    batch_size: int
    observed: bool
    """Whether its cost feeds the arm's posterior."""
    measurement: MeasurementKind
    gpu_model: str
    gpu_count: int
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    error: str | None
    expires_at: datetime | None
    job_phase: str | None = None
    """Where the job stood once it was recorded, as its policy reckons it (``pruning``,
    ``sampling`` or ``infeasible``; ``Policy.job_phase``); None before revision 0013, for
    other policies, and for tries the store took late or failed."""
    recorded_late_at: datetime | None = None
    """When its result reached the store from the outbox (``core/domain/outbox.py``): the store
    failed at the end of training and a later run recorded it. None: recorded on time."""
