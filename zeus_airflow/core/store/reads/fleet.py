"""The fleet page's own reads: each version's latest try, which versions have carbon
figures, and the fleet's energy by DAG run, each one read however many versions there are."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import ColumnElement, Float, ScalarSelect, and_, func, literal_column, select

from zeus_airflow.core.domain import ACCOUNTED
from zeus_airflow.core.domain.phases import falls_back, shown_job_phase
from zeus_airflow.core.store.clock import as_utc
from zeus_airflow.core.store.reads.base import SHOWN, Reads, run_figures
from zeus_airflow.core.store.tables import RUN_KEY, run_carbon, trials


class LatestTry(NamedTuple):
    """A version's latest shown try: when it started (UTC), how it ended, its decision; and
    the job's phase its policy recorded after the latest try that has one (``job_phase``:
    the try in flight has none yet)."""

    started_at: datetime
    status: str
    phase: str
    budget_left_runs: float | None
    job_phase: str | None = None

    @property
    def shown_phase(self) -> str:
        """The job's phase as every surface shows it (``domain.phases.shown_job_phase``)."""
        return shown_job_phase(self.job_phase, self.phase)

    @property
    def falls_back(self) -> bool:
        """Whether the job's runs fall back (``domain.phases.falls_back``)."""
        return falls_back(self.shown_phase, self.phase)


class RunEnergy(NamedTuple):
    """A DAG run's energy in the fleet's chart (``FleetReads.energy_by_run``): of its Zeus
    tasks' runs, with Default's estimate for those finished, in J."""

    dag_id: str | None
    run_id: str
    started_at: datetime
    """UTC; what places the run where Airflow's database has no logical date for it."""
    energy_j: float
    default_energy_j: float


class FleetReads(Reads):
    def latest_tries(self, pks: list[int]) -> dict[int, LatestTry]:
        """Each version's latest shown try. A job's trials are inserted in decision order
        (the decision and the insert share a transaction under the job's lock), so the
        latest has the highest id: a key lookup, where the highest decision_seq would be a
        scan."""
        rows = self.conn.execute(
            select(
                trials.c.job_pk,
                trials.c.started_at,
                trials.c.status,
                trials.c.phase,
                trials.c.budget_left_runs,
            ).where(trials.c.id.in_(_latest_ids(pks, SHOWN)))
        )
        phases = self._job_phases(pks)
        return {
            r.job_pk: LatestTry(
                as_utc(r.started_at), r.status, r.phase, r.budget_left_runs, phases.get(r.job_pk)
            )
            for r in rows
        }

    def _job_phases(self, pks: list[int]) -> dict[int, str]:
        """Each version's latest recorded job phase (``tables.trials.job_phase``)."""
        recorded = _latest_ids(pks, SHOWN, trials.c.job_phase.is_not(None))
        rows = self.conn.execute(
            select(trials.c.job_pk, trials.c.job_phase).where(trials.c.id.in_(recorded))
        )
        return {r.job_pk: r.job_phase for r in rows}

    def with_emissions(self, pks: list[int]) -> list[int]:
        """The versions with a shown run that has carbon figures (``tables.run_carbon``;
        ``domain.ACCOUNTED``)."""
        return list(
            self.conn.execute(
                select(run_carbon.c.job_pk)
                .distinct()
                .join(trials, and_(*(trials.c[k] == run_carbon.c[k] for k in RUN_KEY)))
                .where(run_carbon.c.job_pk.in_(pks), SHOWN, run_carbon.c[ACCOUNTED].is_not(None))
            ).scalars()
        )

    def energy_by_run(self, default_energy_j: Mapping[int, float]) -> list[RunEnergy]:
        """Energy by DAG run, of the versions given (by key, with Default's energy per run,
        J), beside Default's for their finished runs: the fleet chart places each DAG run at
        its logical date, which Airflow's database holds (issue 47). One row per DAG run."""
        if not default_energy_j:
            return []
        per_run = run_figures(list(default_energy_j), (SHOWN,), keyed=True).subquery()
        default = _per_job(per_run.c.job_pk, default_energy_j) * per_run.c.done
        rows = self.conn.execute(
            select(
                per_run.c.dag_id,
                per_run.c.run_id,
                func.min(per_run.c.started_at),
                func.coalesce(func.sum(per_run.c.energy), 0.0),
                func.coalesce(func.sum(default), 0.0),
            ).group_by(per_run.c.dag_id, per_run.c.run_id)
        )
        return [
            RunEnergy(dag, run, as_utc(started), float(used), float(by_default))
            for dag, run, started, used, by_default in rows
        ]


def _latest_ids(pks: list[int], *where: ColumnElement[bool]) -> ScalarSelect[int]:
    """The id of each version's latest trial among those ``where`` picks (trials are inserted
    in decision order: ``FleetReads.latest_tries``)."""
    return (
        select(func.max(trials.c.id))
        .where(trials.c.job_pk.in_(pks), *where)
        .group_by(trials.c.job_pk)
        .scalar_subquery()
    )


def _per_job(job_pk: ColumnElement[int], values: Mapping[int, float]) -> ColumnElement[float]:
    """``CASE job_pk WHEN pk THEN value ... END`` written as SQL text: a thousand jobs' keys
    and numbers, which SQLAlchemy's ``case()`` takes a fifth of a second to build as bound
    parameters. Only ints and floats are written, never text."""
    whens = " ".join(
        f"WHEN {int(pk)} THEN {float(v)!r}" for pk, v in values.items() if math.isfinite(v)
    )
    return literal_column(f"(CASE {job_pk} WHEN -1 THEN 0.0 {whens} ELSE 0.0 END)", Float)
