"""The fleet page's reads: every job's totals against Default, its latest run, and the
fleet's energy day by day, in a fixed number of reads however many jobs there are.

The figures are the job totals' (``jobs.totals``, the Default estimate of
``default.default_estimates``): the job pages and ``zeus-airflow report`` show the same. What
the fleet page does not read is the policy's own view of each job (its phase and next size
take a dozen reads per job): a row shows the phase of the job's latest decision instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, Float, and_, func, literal_column, select

from zeus_airflow.core.reports.jobs import SHOWN, run_figures, totals
from zeus_airflow.core.reports.records import JobTotals, Version
from zeus_airflow.core.reports.report import Emissions, measurement_label
from zeus_airflow.core.reports.runs import runs
from zeus_airflow.core.store.admin import as_utc
from zeus_airflow.core.store.tables import RUN_KEY, run_carbon, trials


@dataclass(frozen=True)
class LastRun:
    """The job's latest try: when it started, how it ended, what its decision was."""

    started_at: datetime
    status: str
    phase: str
    """The decision's: pruning, sampling, concurrent, calibrate, exploit or fallback."""
    budget_left_runs: float | None


@dataclass(frozen=True)
class FleetJob:
    """One row of the fleet page."""

    totals: JobTotals
    last: LastRun | None
    emissions: Emissions

    @property
    def job_id(self) -> str:
        return self.totals.job_id

    @property
    def runs(self) -> int:
        return self.totals.runs

    @property
    def phase(self) -> str:
        """The latest decision's phase ("" before any)."""
        return self.last.phase if self.last else ""

    @property
    def fallback(self) -> bool:
        return self.phase == "fallback"

    @property
    def measurement(self) -> str:
        return measurement_label(self.totals.measurements)

    @property
    def emissions_g(self) -> float | None:
        return self.emissions.emissions_g

    @property
    def default_emissions_g(self) -> float | None:
        return self.emissions.default_emissions_g

    def __getattr__(self, name: str) -> Any:
        """The totals' figures (``energy_j``, ``default_cost``, ``saved_energy_fraction``...)
        are the row's."""
        if name.startswith("__") or name == "totals":
            raise AttributeError(name)
        return getattr(self.totals, name)


@dataclass(frozen=True)
class Fleet:
    jobs: list[FleetJob]
    days: list[tuple[datetime, float, float]]
    """Per period the runs started in (``_days``): the energy of the runs of the jobs with a
    Default estimate, and Default's estimate for their finished runs, in J."""


def fleet(
    conn: Connection, chosen: Sequence[Version], keep: Callable[[FleetJob], bool] = lambda job: True
) -> tuple[Fleet, list[FleetJob]]:
    """The fleet page's rows for ``chosen`` (in that order), those ``keep`` keeps with their
    energy by day; and every row."""
    summed = totals(conn, chosen)
    last = _last_runs(conn, [v.pk for v in chosen])
    emitted = _emissions(conn, list(summed.values()))
    every = [
        FleetJob(summed[v.pk], last.get(v.pk), emitted.get(v.pk, Emissions(None, None)))
        for v in chosen
    ]
    kept = [job for job in every if keep(job)]
    return Fleet(kept, _days(conn, [j.totals for j in kept])), every


def _last_runs(conn: Connection, pks: list[int]) -> dict[int, LastRun]:
    """Each job's latest try. A job's trials are inserted in decision order (the decision
    and the insert share a transaction under the job's lock), so the latest has the highest
    id: a key lookup, where the highest decision_seq would be a scan."""
    latest = (
        select(func.max(trials.c.id))
        .where(trials.c.job_pk.in_(pks), SHOWN)
        .group_by(trials.c.job_pk)
        .scalar_subquery()
    )
    rows = conn.execute(
        select(
            trials.c.job_pk,
            trials.c.started_at,
            trials.c.status,
            trials.c.phase,
            trials.c.budget_left_runs,
        ).where(trials.c.id.in_(latest))
    )
    return {
        r.job_pk: LastRun(as_utc(r.started_at), r.status, r.phase, r.budget_left_runs) for r in rows
    }


def _emissions(conn: Connection, jobs: list[JobTotals]) -> dict[int, Emissions]:
    """Emissions against Default for the jobs with carbon figures (Default's emissions
    need each run's intensity: their runs are read); the others have none."""
    with_carbon = (
        conn.execute(
            select(run_carbon.c.job_pk)
            .distinct()
            .join(trials, and_(*(trials.c[k] == run_carbon.c[k] for k in RUN_KEY)))
            .where(
                run_carbon.c.job_pk.in_([j.version.pk for j in jobs]),
                SHOWN,
                run_carbon.c.emissions_g.is_not(None),
            )
        )
        .scalars()
        .all()
    )
    by_pk = {j.version.pk: j for j in jobs}
    return {pk: Emissions.of(by_pk[pk].default, runs(conn, pk)) for pk in with_carbon}


def _days(conn: Connection, jobs: list[JobTotals]) -> list[tuple[datetime, float, float]]:
    """Energy by the period runs started in (a day; an hour, a minute or a second when the
    runs span less than two days, hours or minutes), of the jobs with a Default estimate (so
    that the two lines compare the same runs), beside Default's for their finished runs.
    The database adds it up: one row per period however many jobs."""
    estimated = {j.version.pk: j.default.energy_j for j in jobs if j.default is not None}
    if not estimated:
        return []
    first, last = conn.execute(
        select(func.min(trials.c.started_at), func.max(trials.c.started_at)).where(
            trials.c.job_pk.in_(list(estimated)), SHOWN
        )
    ).one()
    per_run = run_figures(list(estimated), (SHOWN,)).subquery()
    if first is None:
        return []
    span = as_utc(last) - as_utc(first)
    unit = next((u for u, at_least in PERIODS if span >= at_least), "second")
    period = _period(conn, per_run.c.started_at, unit)
    default = _per_job(per_run.c.job_pk, estimated) * per_run.c.done
    rows = conn.execute(
        select(period.label("period"), func.sum(per_run.c.energy), func.sum(default))
        .group_by(period)
        .order_by(period)
    )
    return [
        (datetime.fromisoformat(p).replace(tzinfo=UTC), float(used), float(by_default))
        for p, used, by_default in rows
    ]


def _per_job(job_pk: ColumnElement[int], values: dict[int, float]) -> ColumnElement[float]:
    """``CASE job_pk WHEN pk THEN value ... END`` written as SQL text: a thousand jobs' keys
    and numbers, which SQLAlchemy's ``case()`` takes a fifth of a second to build as bound
    parameters. Only ints and floats are written, never text."""
    whens = " ".join(f"WHEN {int(pk)} THEN {float(v)!r}" for pk, v in values.items())
    return literal_column(f"(CASE {job_pk} WHEN -1 THEN 0.0 {whens} ELSE 0.0 END)", Float)


PERIODS = (
    ("day", timedelta(days=2)),
    ("hour", timedelta(hours=2)),
    ("minute", timedelta(minutes=2)),
)
"""The period the fleet's timeline adds up by, the first whose span the runs cover."""
_FORMATS = {
    "day": ("%Y-%m-%d", "YYYY-MM-DD"),
    "hour": ("%Y-%m-%d %H:00", "YYYY-MM-DD HH24:00"),
    "minute": ("%Y-%m-%d %H:%M", "YYYY-MM-DD HH24:MI"),
    "second": ("%Y-%m-%d %H:%M:%S", "YYYY-MM-DD HH24:MI:SS"),
}
"""SQLite's strftime and PostgreSQL's to_char formats of each period, read back by
``datetime.fromisoformat``."""


def _period(conn: Connection, moment: ColumnElement[Any], unit: str) -> ColumnElement[str]:
    """The UTC period of a stored time as text: SQLite keeps UTC text, PostgreSQL a
    timestamptz (shown in UTC whatever the session's zone)."""
    sqlite, postgres = _FORMATS[unit]
    if conn.dialect.name == "sqlite":
        return func.strftime(sqlite, moment)
    return func.to_char(func.timezone("UTC", moment), postgres)
