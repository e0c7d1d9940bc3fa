"""What the Zeus policy most likely decides next, read from the snapshot it decides with:
for planning (``core/carbon/expected.py``: how long the next run will take) and for the
reports (the job's phase and best batch size so far). Pure: no store, no randomness."""

from __future__ import annotations

from zeus_airflow.core.decide.best import (
    NoFeasibleBatchSizeError,
    best_known,
    best_success_size,
    bound_for,
)
from zeus_airflow.core.decide.exploring import within_budget
from zeus_airflow.core.decide.in_play import job_phase
from zeus_airflow.core.decide.walk import HistoryOutOfOrderError, walk_state
from zeus_airflow.core.domain import Decision, JobSnapshot


class OutOfOrder(Exception):
    """The history is another policy's (the simulator's baselines): the Zeus policy cannot
    read a phase from it."""


def standing(snapshot: JobSnapshot) -> tuple[str, int | None]:
    """The job's phase and its best batch size so far, as the Zeus policy reckons them
    (``infeasible``: no size in play, runs fall back to the best known one). Raises
    :class:`OutOfOrder` on another policy's history."""
    try:
        phase, in_play = job_phase(snapshot)
    except HistoryOutOfOrderError:
        raise OutOfOrder from None
    if not any(arm.count for arm in snapshot.observations.values()):
        return phase, None
    if not in_play:
        return phase, best_success_size(snapshot)
    return phase, best_known(snapshot, in_play)


def upcoming(snapshot: JobSnapshot) -> tuple[str, int | None]:
    """The batch size the Zeus policy most likely decides next, and the job's phase: the
    pruning walk's next step (or, phase ``exploit``, the best known size when that step
    would not fit in the exploration budget), else the best known size in play (what
    Thompson sampling exploits most often), else the fallback's. None before any
    observation. Raises :class:`OutOfOrder` on another policy's history."""
    try:
        state = walk_state(snapshot)
    except HistoryOutOfOrderError:  # another policy's history
        return standing(snapshot)
    if state.next_batch_size is not None:
        step = Decision(
            state.next_batch_size,
            "pruning",
            early_stop_cost=bound_for(snapshot)(state.next_batch_size),
        )
        try:
            decided = within_budget(snapshot, step)
        except NoFeasibleBatchSizeError:  # only inside a recurrence that already failed
            return "pruning", step.batch_size
        return decided.phase, decided.batch_size
    return standing(snapshot)
