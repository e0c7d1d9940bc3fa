"""The fleet page's rows: every job's totals against Default, its latest run, and the
fleet's energy day by day, in a fixed number of reads however many jobs there are.

The figures are the job totals' (``jobs.totals``, the Default estimate of
``default.default_estimates``) and the job's phase its policy recorded after its latest try
(``LatestTry.shown_phase``): the job pages and ``zeus-airflow report`` show the same. What the
fleet page does not read is the policy's next size (a dozen reads per job).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from zeus_airflow.core.reports.jobs import job_phase_of, totals
from zeus_airflow.core.reports.records import JobTotals, Version
from zeus_airflow.core.reports.report import SHIFT_FIGURES, Emissions, measurement_label, shifted
from zeus_airflow.core.reports.runs import runs
from zeus_airflow.core.store.reads import LatestTry, Reader
from zeus_airflow.core.store.reads.fleet import RunEnergy


@dataclass(frozen=True)
class FleetJob:
    """One row of the fleet page."""

    totals: JobTotals
    last: LatestTry | None
    emissions: Emissions

    @property
    def job_id(self) -> str:
        return self.totals.job_id

    @property
    def runs(self) -> int:
        return self.totals.runs

    @property
    def phase(self) -> str:
        """The job's phase (``domain.phases.shown_job_phase``)."""
        return job_phase_of(self.last)

    @property
    def fallback(self) -> bool:
        return bool(self.last and self.last.falls_back)

    @property
    def measurement(self) -> str:
        return measurement_label(self.totals.measurements)

    def __getattr__(self, name: str) -> Any:
        """Its emissions' figures (gCO2e, Default's, the time shift's) and the totals'
        (``energy_j``, ``default_cost``, ``saved_energy_fraction``...) are the row's."""
        if name.startswith("__") or name in ("totals", "emissions"):
            raise AttributeError(name)
        if name in SHIFT_FIGURES:
            return shifted(self.emissions.shift)[name]
        if name in _EMISSIONS:
            return getattr(self.emissions, name)
        return getattr(self.totals, name)


_EMISSIONS = frozenset(f.name for f in fields(Emissions))


@dataclass(frozen=True)
class Fleet:
    jobs: list[FleetJob]
    runs: list[RunEnergy]
    """Per DAG run (``Reader.energy_by_run``): the energy of the runs of the jobs with a
    Default estimate, and Default's estimate for their finished runs, in J; the fleet page
    places them at their logical dates."""


def fleet(
    reader: Reader, chosen: Sequence[Version], keep: Callable[[FleetJob], bool] = lambda job: True
) -> tuple[Fleet, list[FleetJob]]:
    """The fleet page's rows for ``chosen`` (in that order), those ``keep`` keeps with their
    energy by day; and every row."""
    summed = totals(reader, chosen)
    last = reader.latest_tries([v.pk for v in chosen])
    emitted = _emissions(reader, list(summed.values()))
    every = [
        FleetJob(summed[v.pk], last.get(v.pk), emitted.get(v.pk, Emissions(None, None)))
        for v in chosen
    ]
    kept = [job for job in every if keep(job)]
    estimated = {
        j.totals.version.pk: j.totals.default.energy_j for j in kept if j.totals.default is not None
    }
    return Fleet(kept, reader.energy_by_run(estimated)), every


def _emissions(reader: Reader, jobs: list[JobTotals]) -> dict[int, Emissions]:
    """Emissions against Default for the jobs with carbon figures (Default's emissions
    need each run's intensity: their runs are read); the others have none."""
    by_pk = {j.version.pk: j for j in jobs}
    return {
        pk: Emissions.of(by_pk[pk].default, runs(reader, pk))
        for pk in reader.with_emissions(list(by_pk))
    }
