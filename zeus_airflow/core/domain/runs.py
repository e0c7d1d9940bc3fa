"""Tries and runs: what each word means, and the one rule for each thing a run is made of.

Glossary (the code keeps some older names: a ``Run...`` class may hold a try):

- **try**: one attempt of training within a task instance, one row of ``zeus_trials`` (a
  *trial*). Its classes: ``RunOutcome`` (what it measured, ``domain/outcome.py``),
  ``TrialRecord`` (it as stored, read back, ``domain/trials.py``), ``TrainingRun`` and
  ``open_run`` (the live try a train function drives, ``core/train/run.py``), the engine's
  ``TrialReport``.
- **run**: one task instance's recurrence, its tries in decision order (an Airflow retry,
  a higher ``try_number``, starts it over: the earlier tries are history). Its key is a
  ``RecurrenceKey``; its classes: the engine's ``RecurrenceResult`` (the run as it ends),
  ``reports.RunRecord`` (as the UI and the CLI list it), :class:`PastRun` (a finished run as
  planning reads it), and ``RunCarbon`` (``domain/carbon.py``: the carbon of a run, one row
  of ``zeus_run_carbon``, or of one of its tries).

The rules: :func:`group_runs` (which tries make a run), :func:`run_of` (a run's figures from
its tries'), :func:`run_batch_size` (the batch size a run reports), :func:`finished_run` (a
run planning learns from), :func:`energy_with_setup_j` and :func:`time_with_setup_s`
(training and setup together, of a try or a run).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.domain.figures import FIGURES
from zeus_airflow.core.domain.trials import FINISHED_STATUSES


def group_runs(tries: Iterable[Any]) -> list[list[Any]]:
    """Tries in decision order (with their task instance's ``dag_id``, ``task_id``,
    ``run_id``, ``map_index`` and ``try_number``) grouped into runs, in the order of their
    first try."""
    grouped: dict[tuple[str, str, str, int], list[Any]] = {}
    for t in tries:
        run = grouped.setdefault((t.dag_id, t.task_id, t.run_id, t.map_index), [])
        if run and run[-1].try_number < t.try_number:
            run.clear()  # an Airflow retry after an error: the earlier try is history
        run.append(t)
    return list(grouped.values())


def run_of(tries: Sequence[Any], names: Sequence[str] = tuple(FIGURES)) -> dict[str, Any]:
    """A run's figures from its tries' (objects with the figures as attributes, in order), by
    each figure's ``adds``: the one rule, for the engine's result, the reports' runs and
    planning's past runs alike. A try counts as finished once it has an ``energy_j``."""
    last = tries[-1]
    done = [t for t in tries if t.energy_j is not None]
    run: dict[str, Any] = {}
    for name in names:
        adds = FIGURES[name].adds
        if adds == "last":
            run[name] = getattr(last, name)
            continue
        values = [getattr(t, name) for t in done]
        if adds == "sum_known":
            values = [v for v in values if v is not None]
        run[name] = None if not values or None in values else sum(values)
    return run


def run_batch_size(batch_sizes: Sequence[int]) -> int:
    """The batch size a run reports, from its tries' in order: its last try's, the one that
    reached the target if any (the XCom and metric ``batch_size``, the runs tables, planning's
    :class:`PastRun`)."""
    return batch_sizes[-1]


class WithSetup(Protocol):
    """A try's or a run's figures that :func:`energy_with_setup_j` and
    :func:`time_with_setup_s` read (J and s; None: not measured)."""

    @property
    def energy_j(self) -> float | None: ...
    @property
    def setup_energy_j(self) -> float | None: ...
    @property
    def time_s(self) -> float | None: ...
    @property
    def setup_time_s(self) -> float | None: ...


def energy_with_setup_j(figures: WithSetup, training_j: float | None = None) -> float:
    """Training energy (``training_j``, else its own) and its setup energy (J), 0 for one
    not measured: what the grid supplied, and what the emissions are of."""
    training = figures.energy_j if training_j is None else training_j
    return (training or 0.0) + (figures.setup_energy_j or 0.0)


def time_with_setup_s(figures: WithSetup) -> float:
    """Training and setup time (s), 0 for one not measured: how long a try or a run takes."""
    return (figures.time_s or 0.0) + (figures.setup_time_s or 0.0)


@dataclass(frozen=True)
class PastRun:
    """A finished run (its last try succeeded or failed) as planning reads it, its figures
    summed over its finished tries (:func:`run_of`): seconds and joules, of training and of
    setup before it."""

    batch_size: int
    """The run's (:func:`run_batch_size`: its last try's)."""
    first_batch_size: int
    """Its first try's: the size its first decision chose, which planning matches with the
    size the policy decides next (``core/carbon/expected.py``)."""
    time_s: float
    energy_j: float
    setup_time_s: float | None
    setup_energy_j: float | None
    measurement: MeasurementKind
    """Its last try's."""


_PAST_FIGURES = ("time_s", "energy_j", "setup_time_s", "setup_energy_j")


def finished_run(tries: Sequence[Any]) -> PastRun | None:
    """The run of ``tries`` (with ``batch_size``, ``status``, ``measurement`` and the figures
    of :class:`PastRun`) when it finished with figures: its last try succeeded or failed, and
    its finished tries measured their time; else None."""
    figures = run_of(tries, _PAST_FIGURES)
    if figures["time_s"] is None or tries[-1].status not in FINISHED_STATUSES:
        return None
    return PastRun(
        run_batch_size([t.batch_size for t in tries]),
        tries[0].batch_size,
        measurement=tries[-1].measurement,
        **figures,
    )
