"""The fleet page (the jobs list): the jobs' totals against Default, their energy day by day
against Default's, and the rows filtered and sorted as the query string asks.

Filtering and sorting happen on the server, through links and a form: the page needs no
script, like the charts (``charts.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import accumulate
from typing import Any

from zeus_airflow.core.common.naming import run_id_date
from zeus_airflow.core.common.units import energy_unit
from zeus_airflow.core.reports import FleetTotals, fleet_totals
from zeus_airflow.core.reports.fleet import Fleet, FleetJob
from zeus_airflow.core.store.reads.fleet import RunEnergy
from zeus_airflow.plugins.charts import Axis, Plot, linear_axis
from zeus_airflow.plugins.job_charts import Chart

SORTS: dict[str, Callable[[FleetJob], Any]] = {
    "job": lambda j: j.job_id,
    "runs": lambda j: j.runs,
    "phase": lambda j: j.phase,
    "last_run": lambda j: j.last.started_at.timestamp() if j.last else float("-inf"),
    "budget": lambda j: _missing_last(j.last.budget_left_runs if j.last else None),
    "energy": lambda j: j.totals.energy_j,
    "saved": lambda j: _missing_last(j.totals.saved_energy_fraction),
    "cost_saved": lambda j: _missing_last(j.totals.saved_cost_fraction),
}
"""The columns the table sorts by (``?sort=``), each by its own figure."""


def pages(rows: int) -> int:
    return max(1, -(-rows // PER_PAGE))


def _missing_last(value: float | None) -> float:
    return float("-inf") if value is None else value


@dataclass(frozen=True)
class View:
    """What the query string asks for; every field may be empty."""

    dag: str = ""
    phase: str = ""
    fallback: bool = False
    sort: str = ""
    desc: bool = False
    page: int = 1

    def keeps(self, job: FleetJob) -> bool:
        return (
            (not self.dag or self.dag in job.totals.dags)
            and (not self.phase or job.phase == self.phase)
            and (not self.fallback or job.fallback)
        )

    def query(self, **changes: Any) -> str:
        """This view's query string with ``changes``, for a link (page 1 left out)."""
        chosen = {**self.__dict__, **changes}
        return "?" + "&".join(
            f"{k}={v if not isinstance(v, bool) else int(v)}"
            for k, v in chosen.items()
            if v and not (k == "page" and v == 1)
        )

    def sort_link(self, key: str) -> str:
        """The header link: sort by ``key``, the other way round when it already is (from
        the first page)."""
        return self.query(sort=key, desc=self.sort == key and not self.desc, page=1)

    def page_link(self, page: int) -> str:
        return self.query(page=page)


PER_PAGE = 100
"""Rows a page shows; the totals and the chart are of every row the filters keep."""


@dataclass(frozen=True)
class FleetPage:
    jobs: list[FleetJob]
    """The rows shown: filtered, sorted, this page's."""
    rows: int
    """Every row the filters keep."""
    totals: FleetTotals
    """Of the rows shown."""
    chart: Chart | None
    dags: list[str]
    phases: list[str]
    view: View


def fleet_page(found: Fleet, every: Sequence[FleetJob], view: View) -> FleetPage:
    """The page of ``found`` (the rows the view keeps, with their days), sorted as asked;
    ``every`` job the user may see names the filters' choices."""
    shown = list(found.jobs)
    if view.sort in SORTS:
        shown.sort(key=SORTS[view.sort], reverse=view.desc)
    start = (min(max(view.page, 1), pages(len(shown))) - 1) * PER_PAGE
    return FleetPage(
        shown[start : start + PER_PAGE],
        len(shown),
        fleet_totals(shown),
        energy_chart(by_logical_date(found.runs)),
        sorted({d for j in every for d in j.totals.dags}),
        sorted({j.phase for j in every if j.phase}),
        view,
    )


WHOLE_WIDTH_PX = 1160
"""The chart's drawing width: the page's at 1,280 px, so that its text keeps its size."""
TIME_TICKS = ((86400.0, "%m-%d"), (3600.0, "%H:00"), (60.0, "%H:%M"), (1.0, "%H:%M:%S"))
"""The chart's time axis: ticks a whole number of days, hours, minutes or seconds apart (the
largest of which the runs span two), and how they read."""


def by_logical_date(runs: Sequence[RunEnergy]) -> list[tuple[datetime, float, float]]:
    """The DAG runs' energy and Default's, added up by logical date (Airflow's database,
    as the job page's runs table reads it; else the date in the run id, else when the run
    started), in date order: the fleet chart's points (issue 47: by wall-clock time, a
    backfill of 60 days drew as one afternoon)."""
    dates = _logical_dates(runs)
    summed: dict[datetime, tuple[float, float]] = {}
    for r in runs:
        date = dates.get((r.dag_id or "", r.run_id)) or run_id_date(r.run_id) or r.started_at
        used, default = summed.get(date, (0.0, 0.0))
        summed[date] = (used + r.energy_j, default + r.default_energy_j)
    return [(date, *summed[date]) for date in sorted(summed)]


def _logical_dates(runs: Sequence[RunEnergy]) -> dict[tuple[str, str], datetime]:
    """The runs' logical dates from Airflow's database; none where it cannot be read."""
    from zeus_airflow.airflow_db import logical_dates

    try:
        return logical_dates((r.dag_id, r.run_id) for r in runs if r.dag_id)
    except Exception:  # no Airflow database here (a page rendered in a test, say)
        return {}


def energy_chart(days: Sequence[tuple[datetime, float, float]]) -> Chart | None:
    """Cumulative energy of the jobs with a Default estimate, logical date by logical date,
    and Default's, on an axis of logical dates, the page's whole width."""
    if len(days) < 2:
        return None
    used = list(accumulate(d[1] for d in days))
    default = list(accumulate(d[2] for d in days))
    unit = energy_unit(used + default)
    first = days[0][0]
    seconds = [(d[0] - first).total_seconds() for d in days]
    step, fmt = next(
        ((step, fmt) for step, fmt in TIME_TICKS if seconds[-1] >= 2 * step), TIME_TICKS[-1]
    )
    x = [t / step for t in seconds]
    axis = linear_axis("logical date (UTC)", x, zero=False, integer=True)
    axis = Axis(
        axis.label,
        axis.lo,
        axis.hi,
        axis.ticks,
        lambda v: (first + timedelta(seconds=v * step)).strftime(fmt),
    )
    plot = Plot(
        "Cumulative energy of the fleet",
        axis,
        linear_axis(f"energy ({unit.name})", [v / unit.scale for v in used + default]),
        width=WHOLE_WIDTH_PX,
    )
    plot.line([(i, e / unit.scale) for i, e in zip(x, used, strict=True)], "s0")
    plot.legend("the jobs' runs", "s0")
    plot.line([(i, e / unit.scale) for i, e in zip(x, default, strict=True)], "s1", dashed=True)
    plot.legend("Default (estimate)", "s1")
    return Chart(
        "fleet-cumulative",
        "Cumulative energy against Default",
        "Solid: the energy the runs of the jobs with a Default estimate used, by their DAG "
        "runs' logical dates. Dashed: Default's estimate for their finished runs.",
        plot.svg(),
        tuple(plot.legend_items),
    )
