"""The outbox: results the store could not take at the end of training, kept for later.

The first rule (docs/algorithm.md) puts the model first: once the train function has returned,
no fault of the store (an outage, a read-only or full database) fails the task. The engine
keeps such a result as a :class:`PendingResult`; the caller keeps it somewhere that outlives
the task (the operator: an XCom of its run) and hands it to the next recurrence, on any worker,
which records it before deciding (``Engine.record_late``). Recording one is idempotent:
the store takes a result only for a trial that has none yet, so a result drained twice (two
runs at once, a run that failed after draining) counts once. The trial then shows when its
result arrived (``recorded_late_at``).

An outbox is untrusted input: it lives where anyone with XCom access can write (a corrupted
or forged entry, a value of another version). Each entry is checked before anything is
stored: that it parses, that its figures have their declared types and bounds
(:func:`pending_problem`), and, by the store, that it matches the trial it claims
(:func:`claim_problem`). A bad entry is refused with a warning and kept for inspection
(:class:`RefusedResult`, the operator's XCom ``zeus_outbox_refused``), never stored and
never carried on; its trial, still unfinished, expires after its lease as any lost try.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, get_args

from zeus_airflow.core.common.config import finite_number, short_repr
from zeus_airflow.core.domain.figures import (
    MAX_COUNT,
    TRY_FIGURES,
    figure_problem,
    power_problem,
)
from zeus_airflow.core.domain.finite import strict_json_value
from zeus_airflow.core.domain.outcome import ObserverReport, RunOutcome, StopReason
from zeus_airflow.core.domain.trials import RecurrenceKey


@dataclass(frozen=True)
class PendingResult:
    """A finished try's result that is not in the store yet, with what identifies its trial
    (so that an outbox handed to another store, or a trial id reused, records nothing)."""

    trial_id: int
    job_pk: int
    """The job version's row in the store (``JobRef.id``)."""
    key: RecurrenceKey
    attempt: int
    outcome: RunOutcome
    observed: bool
    """Whether the result counts for its batch size (decided when the try finished)."""
    finished_at: datetime
    """When the try finished (the worker's clock: the store could not be asked)."""
    failure: str
    """Why the store could not take it (the store's error)."""
    invalid_reason: str | None = None
    """Set when the try broke the train function's contract: recorded as ``invalid``."""
    started_at: datetime | None = None
    """When the try started (the worker's clock): with ``finished_at``, the span its carbon
    figures are computed over while the store cannot say."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (an XCom value)."""
        return {
            **asdict(self),
            "finished_at": self.finished_at.isoformat(),
            "started_at": self.started_at and self.started_at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PendingResult:
        outcome = dict(data["outcome"])
        observer = outcome.pop("observer", None)
        return cls(
            **{
                **data,
                "key": RecurrenceKey(**data["key"]),
                "outcome": RunOutcome(**outcome, observer=observer and ObserverReport(**observer)),
                "finished_at": datetime.fromisoformat(data["finished_at"]),
                "started_at": data.get("started_at") and datetime.fromisoformat(data["started_at"]),
            }
        )


@dataclass(frozen=True)
class RefusedResult:
    """An outbox entry refused as untrusted input: never stored, kept for inspection."""

    entry: Any
    """The entry as found (its JSON value; a NaN or an infinity in it as None)."""
    reason: str
    """What is wrong with it, naming the field and its value."""

    def to_json(self) -> dict[str, Any]:
        return {"refused_because": self.reason, "entry": strict_json_value(self.entry)}


def pending_problem(pending: PendingResult) -> str | None:
    """What makes an outbox entry unusable, on its own: its identifiers' and dates' types,
    and its outcome (:func:`outcome_problem`); None when it may be recorded."""
    for name, value in (
        ("trial_id", pending.trial_id),
        ("job_pk", pending.job_pk),
        ("attempt", pending.attempt),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            return f"{name}={short_repr(value)} is not an integer >= 1"
    key = pending.key
    if not all(isinstance(v, str) for v in (key.run_id, key.dag_id, key.task_id)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in (key.map_index, key.try_number)
    ):
        return f"key={short_repr(key, 200)} is not a task instance's (texts and integers)"
    if not isinstance(pending.observed, bool):
        return f"observed={short_repr(pending.observed)} is not True or False"
    if not isinstance(pending.failure, str) or not isinstance(pending.invalid_reason, str | None):
        return "failure and invalid_reason are not texts"
    for name, moment in (("finished_at", pending.finished_at), ("started_at", pending.started_at)):
        if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
            return f"{name}={short_repr(moment)} is not a date and time with its offset"
    if pending.started_at is not None and pending.started_at > pending.finished_at:
        return f"started_at={pending.started_at.isoformat()} is after finished_at"
    return outcome_problem(pending.outcome)


_REQUIRED = frozenset(
    f.name for f in fields(RunOutcome) if f.name in TRY_FIGURES and "None" not in str(f.type)
)
"""The try figures every finished try measures (``RunOutcome``'s fields that are never None)."""


def outcome_problem(outcome: RunOutcome, gpu_count: int | None = None) -> str | None:
    """What makes a try's outcome implausible: a figure of the wrong type or outside its
    declared bounds (``domain.figures``: NaN, 1e308 J, a negative cost), with ``gpu_count``
    an energy or a cost more than its GPUs can spend in its time (``figures.power_problem``),
    a batch size that is none, a stop reason that is none; None when every figure is
    plausible."""
    size = outcome.batch_size
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_COUNT:
        return f"batch_size={short_repr(size)} is not an integer >= 1"
    for name in TRY_FIGURES:
        problem = figure_problem(name, getattr(outcome, name), required=name in _REQUIRED)
        if problem is not None:
            return problem
    if gpu_count is not None:
        values = {name: getattr(outcome, name) for name in TRY_FIGURES}
        problem = power_problem(values, gpu_count)
        if problem is not None:
            return problem
    if outcome.stop_reason not in get_args(StopReason):
        return f"stop_reason={short_repr(outcome.stop_reason)} is not one of {get_args(StopReason)}"
    metric = outcome.last_metric
    if metric is not None and finite_number(metric) is None:
        return f"last_metric={short_repr(metric)} is not a finite number"
    if not isinstance(outcome.profile_unfinished, bool):
        return f"profile_unfinished={short_repr(outcome.profile_unfinished)} is not a bool"
    return None


def claim_problem(pending: PendingResult, trial: Mapping[str, Any]) -> str | None:
    """Whether an outbox entry is the result of the stored ``trial`` it claims (its row:
    job version, task instance, attempt and batch size); None when it is."""
    key = pending.key
    claimed = {
        "job_pk": pending.job_pk,
        "dag_id": key.dag_id,
        "task_id": key.task_id,
        "run_id": key.run_id,
        "map_index": key.map_index,
        "attempt": pending.attempt,
        "batch_size": pending.outcome.batch_size,
    }
    differ = {name: value for name, value in claimed.items() if trial[name] != value}
    if not differ:
        return outcome_problem(pending.outcome, trial.get("gpu_count"))
    shown = ", ".join(f"{k}={v!r} (the trial's: {trial[k]!r})" for k, v in differ.items())
    return f"it claims trial {pending.trial_id} but differs from it: {shown}"


def outbox_to_json(pending: list[PendingResult]) -> list[dict[str, Any]]:
    """The outbox as a JSON-compatible value (an XCom's)."""
    return [p.to_json() for p in pending]


def read_outbox(value: object) -> tuple[list[PendingResult], list[RefusedResult]]:
    """The entries of an outbox (its JSON value, or that value as text) that parse and are
    plausible (:func:`pending_problem`), and those refused, each with why. Never raises: an
    entry cannot hide the others."""
    if value is None or value == "":
        return [], []
    try:
        items = json.loads(value) if isinstance(value, str) else value
    except ValueError as err:
        return [], [RefusedResult(value, f"the outbox is not JSON ({err})")]
    if not isinstance(items, list):
        return [], [RefusedResult(items, f"the outbox is a {type(items).__name__}, not a list")]
    pending: list[PendingResult] = []
    refused: list[RefusedResult] = []
    for item in items:
        try:
            result = PendingResult.from_json(item)
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            refused.append(
                RefusedResult(item, f"not a pending result ({type(err).__name__}: {err})")
            )
            continue
        problem = pending_problem(result)
        if problem is None:
            pending.append(result)
        else:
            refused.append(RefusedResult(item, problem))
    return pending, refused


def outbox_from_json(value: object) -> list[PendingResult]:
    """The pending results an outbox holds (its JSON value, or that value as text). Raises
    ValueError for anything that is not one."""
    if value is None or value == "":
        return []
    try:
        items = json.loads(value) if isinstance(value, str) else value
        if not isinstance(items, list):
            raise TypeError(f"a {type(items).__name__}, not a list")
        return [PendingResult.from_json(item) for item in items]
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise ValueError(
            f"not an outbox of pending results ({type(err).__name__}: {err})"
        ) from None
