"""The outbox: results the store could not take at the end of training, kept for later.

The first rule (docs/algorithm.md) puts the model first: once the train function has returned,
no fault of the store (an outage, a read-only or full database) fails the task. The engine
keeps such a result as a :class:`PendingResult`; the caller keeps it somewhere that outlives
the task (the operator: an XCom of its run) and hands it to the next recurrence, on any worker,
which records it before deciding (``Engine.record_late``). Recording one is idempotent:
the store takes a result only for a trial that has none yet, so a result drained twice (two
runs at once, a run that failed after draining) counts once. The trial then shows when its
result arrived (``recorded_late_at``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from zeus_airflow.core.domain.outcome import ObserverReport, RunOutcome
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


def outbox_to_json(pending: list[PendingResult]) -> list[dict[str, Any]]:
    """The outbox as a JSON-compatible value (an XCom's)."""
    return [p.to_json() for p in pending]


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
