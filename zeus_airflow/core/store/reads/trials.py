"""Tries and their figures as the reports add them up: a version's tries one by one, and
sums over many versions in a fixed number of reads however many there are."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import Select, bindparam, func, select

from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.domain import (
    FIGURES,
    RUN_FIGURES,
    TRY_FIGURES,
    RecurrenceKey,
    TrainingFigures,
)
from zeus_airflow.core.store.reads.base import Reads, run_figures, shown
from zeus_airflow.core.store.state import RAN_TO_ITS_END, known
from zeus_airflow.core.store.tables import RUN_KEY, run_carbon, trials

_SUMMED = tuple(name for name in TRY_FIGURES if FIGURES[name].adds != "last")
"""A try's figures that add up (``core/domain/figures.py``)."""


class PlaceSums(NamedTuple):
    """A version's shown tries in one place (DAG, task, measurement), added up."""

    job_pk: int
    dag_id: str
    task_id: str
    measurement: MeasurementKind
    energy_j: float
    time_s: float
    cost: float


class RunCount(NamedTuple):
    runs: int
    finished: int
    """Runs with figures and no try still training (``run_figures``)."""


class Alike(NamedTuple):
    """A version's runs alike, added up: the tries of one batch size at one limit and GPU
    setup that ran to their end (``store.state.RAN_TO_ITS_END``, the runs the budget's books
    count). Those of the default batch size are what the Default estimate scales; all of
    them, how much runs that should cost the same vary (their spread)."""

    job_pk: int
    batch_size: int
    power_limit_w: int
    gpu_model: str
    gpu_count: int
    runs: int
    energy_j: float
    energy_j_sq: float
    """The sum of the squares (J²); the others likewise."""
    time_s: float
    time_s_sq: float
    cost: float
    """Cost units: what is not energy in it (time at MAXPOWER, the host's energy where it
    counts) scales with time."""
    cost_sq: float


def _read_as(name: str) -> Any:
    """A column as the reports read it: a try figure outside its declared bounds (NULL, NaN,
    1e308, a negative cost) as NULL, missing (``store.state.known``); others as stored."""
    figure = FIGURES.get(name)
    if figure is None or figure.bounds is None:
        return trials.c[name]
    return known(name).label(name)


@cache
def _shown_tries(columns: tuple[str, ...]) -> Select[Any]:
    return (
        select(*(_read_as(name) for name in dict.fromkeys(columns)))
        .where(trials.c.job_pk == bindparam("job_pk"), *shown())
        .order_by(trials.c.decision_seq)
    )


_RUN_CARBON = select(*(run_carbon.c[name] for name in (*RUN_KEY[1:], *RUN_FIGURES)))


class TrialReads(Reads):
    def run_carbon(self, job_pk: int) -> dict[tuple[Any, ...], Any]:
        """The version's runs' carbon figures (``tables.run_carbon``), by the run's key
        (``dag_id``, ``task_id``, ``run_id``, ``map_index``, ``try_number``)."""
        rows = self.conn.execute(_RUN_CARBON.where(run_carbon.c.job_pk == job_pk))
        return {tuple(r[: len(RUN_KEY) - 1]): r for r in rows}

    def shown_tries(self, job_pk: int, columns: tuple[str, ...]) -> Iterable[Any]:
        """The version's shown tries in decision order, with ``columns`` (rows read by
        column name), as the database returns them: a long job has thousands."""
        return self.conn.execute(_shown_tries(columns), dict(job_pk=job_pk))

    def run_tries(self, job_pk: int, key: RecurrenceKey, columns: tuple[str, ...]) -> list[Any]:
        """One run's shown tries (the task instance's, of Airflow try ``key.try_number``) in
        decision order, with ``columns``."""
        chosen = _shown_tries(columns).where(
            trials.c.dag_id == key.dag_id,
            trials.c.task_id == key.task_id,
            trials.c.run_id == key.run_id,
            trials.c.map_index == key.map_index,
            trials.c.try_number == key.try_number,
        )
        return list(self.conn.execute(chosen, dict(job_pk=job_pk)))

    def place_sums(self, pks: list[int], since: datetime | None = None) -> list[PlaceSums]:
        """Energy, time and cost of each version's shown tries (started at or after
        ``since``), per place they ran in."""
        t = trials.c
        rows = self.conn.execute(
            select(
                t.job_pk,
                t.dag_id,
                t.task_id,
                t.measurement,
                func.coalesce(func.sum(known("energy_j")), 0.0),
                func.coalesce(func.sum(known("time_s")), 0.0),
                func.coalesce(func.sum(known("cost")), 0.0),
            )
            .where(t.job_pk.in_(pks), *shown(since))
            .group_by(t.job_pk, t.dag_id, t.task_id, t.measurement)
        )
        return [PlaceSums._make(r) for r in rows]

    def run_counts(self, pks: list[int], since: datetime | None = None) -> dict[int, RunCount]:
        """Each version's runs (started at or after ``since``), and how many finished."""
        per_run = run_figures(pks, shown(since)).subquery()
        rows = self.conn.execute(
            select(
                per_run.c.job_pk,
                func.count().label("runs"),
                func.coalesce(func.sum(per_run.c.done), 0).label("done"),
            ).group_by(per_run.c.job_pk)
        )
        return {r.job_pk: RunCount(r.runs, int(r.done)) for r in rows}

    def observe_sums(
        self, pks: list[int], since: datetime | None = None
    ) -> dict[int, TrainingFigures]:
        """Each version's tries that trained in observe mode (and made an estimate), their
        figures that add up summed (``core/domain/figures.py``); started at or after
        ``since``. Versions without such a try are left out."""
        t = trials.c
        rows = self.conn.execute(
            select(t.job_pk, *(func.sum(known(name)).label(name) for name in _SUMMED))
            .where(t.job_pk.in_(pks), t.would_save_energy_j.is_not(None), *shown(since))
            .group_by(t.job_pk)
        ).mappings()
        return {r["job_pk"]: TrainingFigures(**{name: r[name] for name in _SUMMED}) for r in rows}

    def alike_runs(self, pks: list[int]) -> list[Alike]:
        """Each version's runs alike (:class:`Alike`), a row per batch size, limit and GPU
        setup that ran to its end: the Default estimate and the runs' own spread, in one
        read however many versions (a row per limit trained at, not per run)."""
        t = trials.c
        figures = (t.energy_j, t.time_s, t.cost)
        key = (t.job_pk, t.batch_size, t.power_limit_w, t.gpu_model, t.gpu_count)
        rows = self.conn.execute(
            select(
                *key,
                func.count(),
                *(f(c) for c in figures for f in (func.sum, lambda c: func.sum(c * c))),
            )
            .where(t.job_pk.in_(pks), *RAN_TO_ITS_END)
            .group_by(*key)
        )
        return [Alike._make(r) for r in rows]
