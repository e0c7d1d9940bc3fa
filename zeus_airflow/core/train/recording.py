"""Around one recurrence, for any entry point (the operator is one): the results earlier runs
could not record, and what a run that missed its target does.

A result the store cannot take waits in an outbox (``core/domain/outbox.py``) that the entry
point keeps where it outlives the run (the operator: an XCom). :class:`Backlog` records the
earlier runs' before the first decision (so that it sees them), and this run's once more when
training ends (an outage shorter than the rest of the task then leaves nothing behind); what
still fails is handed back to be kept for the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from zeus_airflow.core.domain import PendingResult, RefusedResult
from zeus_airflow.core.store.base import Store
from zeus_airflow.core.train.engine import record_late
from zeus_airflow.core.train.run import TargetMissedError

if TYPE_CHECKING:
    from zeus_airflow.core.train.engine import RecurrenceResult


class Backlog:
    """The results not in the store yet: earlier runs' and this one's; and the outbox
    entries refused as untrusted (``core/domain/outbox.py``), kept for inspection."""

    def __init__(
        self,
        store: Store,
        earlier: Sequence[PendingResult],
        log: logging.Logger,
        refused: Sequence[RefusedResult] = (),
    ) -> None:
        self._store, self._log = store, log
        self.refused = list(refused)
        """Entries refused: those that did not parse (``refused``), then those checked here."""
        self.earlier = record_late(store, earlier, log, self.refused)
        """Earlier runs' results the store still cannot take."""
        self.unrecorded: list[PendingResult] = []
        """This run's, filled with the engine's ``unrecorded`` as the run goes."""

    def settle(self) -> list[PendingResult]:
        """Records this run's results once more; returns every result still to keep."""
        self.unrecorded[:] = record_late(self._store, self.unrecorded, self._log, self.refused)
        return [*self.earlier, *self.unrecorded]


def missed_target(
    result: RecurrenceResult, target_metric: float, fail: bool, log: logging.Logger
) -> None:
    """One rule every day: a run that trained but missed the target is a warning, unless
    the job asked for a failure (:class:`TargetMissedError`)."""
    final = result.final.outcome
    message = (
        f"the run ended without reaching target_metric={target_metric} "
        f"(last metric {final.last_metric}, {final.stop_reason} after "
        f"{final.epochs} epochs at batch size {final.batch_size})"
    )
    if fail:
        raise TargetMissedError(
            f"{message}; failing because fail_on_missed_target=True (the run is recorded)"
        )
    log.warning(
        "Zeus: %s; the task succeeds (set fail_on_missed_target=True to fail it instead)",
        message,
    )
