"""Carbon as a service: when a run should start (planning) and what it emitted and cost
(accounting), for every entry point. The operator uses :class:`CarbonService`; the simulator
(``sim/carbon.py``) calls the same functions on its replayed runs: :func:`expected_run` (what
the job's history expects of its next run), :func:`plan_start` (the start before a deadline
that minimises the objective) and :func:`emissions` (the one emissions formula:
``energy_kwh x the time-weighted mean intensity over the span``). The CLI and the UI read the
figures it records through the store.

The first rule holds throughout: no failure of a source or of the store fails a run. A start
that cannot be planned starts now; figures that cannot be had fall back (labelled
``fallback``) or are left out, saying why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from zeus_airflow.core.carbon.accounting import span_emissions as emissions
from zeus_airflow.core.carbon.expected import expected_run
from zeus_airflow.core.carbon.options import CarbonOptions
from zeus_airflow.core.carbon.planner import StartPlan, plan_start, start_now
from zeus_airflow.core.carbon.recurrence import TrySpan, account, stored
from zeus_airflow.core.carbon.signal import GridSource, SourceError
from zeus_airflow.core.domain import RecurrenceKey, RunCarbon, energy_with_setup_j
from zeus_airflow.core.store.base import Store, StoreError

if TYPE_CHECKING:
    from zeus_airflow.core.train.engine import RecurrenceResult

__all__ = ["CarbonService", "emissions", "expected_run", "plan_start"]


class CarbonService:
    """Planning and accounting for one task's runs, as its options say. ``electricitymaps``
    builds the API client (the entry point knows where its token is); ``log`` is the task's."""

    def __init__(
        self,
        options: CarbonOptions,
        electricitymaps: Callable[[], GridSource],
        log: logging.Logger,
    ) -> None:
        self.options, self._electricitymaps, self._log = options, electricitymaps, log

    def source(self) -> GridSource:
        return self.options.grid_source(self._electricitymaps)

    # --- planning ----------------------------------------------------------------------------
    def plan(self, open_store: Callable[[], Store], job_id: str) -> StartPlan | None:
        """When to start, from the job's history and the forecast; None without a
        ``start_deadline``. Any failure here starts the run now, saying why: waiting is an
        optimisation, never a reason not to train."""
        now = datetime.now(UTC)
        deadline = self.options.deadline(now)
        if deadline is None:
            return None
        try:
            return self._plan(open_store, job_id, now, deadline)
        except Exception as err:  # the first rule: whatever broke, the run still trains
            self._log.warning("Zeus: the start could not be planned, starting now", exc_info=True)
            return start_now(
                now,
                f"the start could not be planned ({type(err).__name__}: {err}): starting now",
                deadline,
            )

    def _plan(
        self, open_store: Callable[[], Store], job_id: str, now: datetime, deadline: datetime
    ) -> StartPlan:
        expected = expected_run(open_store(), job_id, self.options.expected_duration_s)
        if expected is None:
            return start_now(
                now,
                "the job has no finished run yet and no expected_duration was given: starting now",
                deadline,
            )
        try:
            forecast = self.source().points(self.options.zone, now, deadline)
        except SourceError as err:
            return start_now(now, f"no forecast ({err}): starting now", deadline, expected)
        objective = cast("Any", self.options.objective)
        return plan_start(now, deadline, expected, forecast, objective, self.options.weight)

    # --- accounting --------------------------------------------------------------------------
    def checked_source(self) -> GridSource | SourceError:
        """The source, or the error that stands for it (the run's figures then fall back,
        labelled ``fallback``): built before training, so that a bad trace is said then, and
        any failure is a warning, never a failed task."""
        try:
            return self.source()
        except Exception as err:  # any source's error: the first rule
            fallback = self.options.fallback_g_per_kwh
            self._log.warning(
                "Zeus: the carbon source %r cannot be used (%s); the run's carbon "
                "figures fall back to %s",
                self.options.source,
                err,
                "no figure"
                if fallback is None
                else f"{fallback:g} gCO2e/kWh (provenance fallback)",
            )
            return (
                err if isinstance(err, SourceError) else SourceError(f"{type(err).__name__}: {err}")
            )

    def account(
        self,
        store: Store,
        key: RecurrenceKey,
        result: RecurrenceResult,
        source: GridSource | SourceError,
        plan: StartPlan | None,
    ) -> RunCarbon:
        """The run ``key``'s emissions and cost, each try's over its own span (``source``: the
        one :meth:`checked_source` gave), recorded in the store and returned. A failing source
        falls back, saying so; a failure to record them is a warning (the measured run is
        recorded already, or waits in the outbox)."""
        tries = self._spans(store, result)
        zone, fallback = self.options.zone, self.options.fallback
        try:
            run, per_try = account(source, zone, tries, fallback, plan)
        except Exception as err:  # a source that broke mid-way: the first rule, fall back
            self._log.warning(
                "Zeus: the carbon figures cannot be computed from the source: %s: %s",
                type(err).__name__,
                err,
            )
            broken = SourceError(f"{type(err).__name__}: {err}")
            run, per_try = account(broken, zone, tries, fallback, plan)
        if run.carbon_provenance == "fallback":
            self._log.warning(
                "Zeus: the run's carbon intensity fell back to %.4g gCO2e/kWh: %s",
                run.carbon_intensity_g_per_kwh,
                run.carbon_note,
            )
        record = stored(run, per_try, tries)
        try:
            if record is not None:
                store.record_carbon(result.job.id, key, record)
        except StoreError as err:
            self._log.warning(
                "Zeus: the carbon figures are in the XComs but not in the store: %s", err
            )
        return run

    def _spans(self, store: Store, result: RecurrenceResult) -> list[TrySpan]:
        """Each finished try's energy (training and setup) and span: the store's, else
        (a try the store could not take) the one the worker saw, by its clock."""
        try:
            spans = store.trial_spans([t.trial_id for t in result.tries])
        except StoreError as err:
            self._log.warning("Zeus: the tries' spans cannot be read, no carbon figures: %s", err)
            spans = {}
        spans |= {
            p.trial_id: (p.started_at, p.finished_at)
            for p in result.unrecorded
            if p.started_at is not None and p.trial_id not in spans
        }
        return [
            TrySpan(t.trial_id, energy_with_setup_j(t.outcome), *spans[t.trial_id])
            for t in result.tries
            if t.trial_id in spans
        ]
