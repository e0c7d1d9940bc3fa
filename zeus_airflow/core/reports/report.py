"""The results at a glance (``zeus-airflow report``): per job, what it did, what Default
would have done and what the next run will do; and the fleet's totals.

Built on the job summaries (``summaries``: one source for the figures and the savings the
UI shows too); what a summary lacks (the next run, the budget, the emissions against
Default) comes from the job's runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from zeus_airflow.core.reports.arms import upcoming_batch_size
from zeus_airflow.core.reports.default import default_emissions_g
from zeus_airflow.core.reports.jobs import current, job_dags, summaries, versions
from zeus_airflow.core.reports.records import JobSummary, RunRecord, saved_fraction
from zeus_airflow.core.reports.runs import runs


@dataclass(frozen=True)
class Emissions:
    """gCO2e of the runs with carbon figures, and of Default over the same runs (None
    where there is no Default estimate yet)."""

    emissions_g: float | None
    default_emissions_g: float | None

    @classmethod
    def of(cls, summary: JobSummary, shown: Sequence[RunRecord]) -> Emissions:
        defaults = default_emissions_g(summary.default, shown)
        pairs = [(r.emissions_g, d) for r, d in zip(shown, defaults, strict=True)
                 if r.emissions_g is not None]
        if not pairs:
            return cls(None, None)
        default = None if any(d is None for _, d in pairs) else sum(d for _, d in pairs
                                                                     if d is not None)
        return cls(sum(e for e, _ in pairs), default)


@dataclass(frozen=True)
class JobReport:
    """One job (its current version) at a glance."""

    summary: JobSummary
    next_phase: str
    """What the next run most likely does: pruning (the walk's next size), sampling, or
    infeasible (it falls back to the best known size)."""
    next_batch_size: int | None
    last_run: RunRecord | None
    emissions: Emissions

    def fields(self) -> dict[str, Any]:
        """The JSON fields: SI units (J, s, gCO2e), cost in the paper's units, fractions
        of Default's figure saved (negative: spent more)."""
        s, last, e = self.summary, self.last_run, self.emissions
        return {
            "job_id": s.job_id, "version": s.version.version,
            "dags": sorted({dag for dag, _ in s.tasks if dag}),
            "runs": s.runs, "finished_runs": s.finished_runs, "phase": s.phase,
            "next_phase": self.next_phase, "next_batch_size": self.next_batch_size,
            "best_batch_size": s.best_batch_size, "best_power_limit_w": s.best_power_limit_w,
            "last_run_at": last.started_at.isoformat() if last else None,
            "last_status": last.status if last else None,
            "fallback": s.phase == "infeasible" or bool(last and last.phase == "fallback"),
            "energy_j": s.energy_j, "default_energy_j": s.default_energy_j,
            "saved_energy_fraction": s.saved_energy_fraction,
            "time_s": s.time_s, "default_time_s": s.default_time_s,
            "saved_time_fraction": s.saved_time_fraction,
            "cost": s.cost, "default_cost": s.default_cost,
            "saved_cost_fraction": s.saved_cost_fraction,
            "emissions_g": e.emissions_g, "default_emissions_g": e.default_emissions_g,
            "saved_emissions_fraction": saved_fraction(e.emissions_g, e.default_emissions_g),
            "budget_left_runs": last.budget_left_runs if last else None,
            "measurement": measurement_label(s.measurements),
        }


def measurement_label(kinds: Sequence[str]) -> str:
    """measured, replayed or simulated (``+``-joined when mixed), so that a simulated figure
    is never read as measured; "" before any run."""
    return "+".join(sorted(set(kinds)))


_COMPARED = (("energy_j", "default_energy_j", "saved_energy_fraction"),
             ("time_s", "default_time_s", "saved_time_fraction"),
             ("cost", "default_cost", "saved_cost_fraction"),
             ("emissions_g", "default_emissions_g", "saved_emissions_fraction"))
"""Each figure, Default's, and the fraction saved."""


def fleet_totals(jobs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The fleet's totals from the jobs' fields: every job's figures summed, and Default's
    summed over the jobs that have a Default figure, beside those jobs' own figures
    (``compared_*``), so that the fraction saved compares like with like."""
    totals: dict[str, Any] = {"jobs": len(jobs), "runs": sum(j["runs"] for j in jobs)}
    for figure, default, saved in _COMPARED:
        known = [j for j in jobs if j[figure] is not None]
        compared = [j for j in known if j[default] is not None]
        totals[figure] = sum(j[figure] for j in known) if known else None
        used = sum(j[figure] for j in compared) if compared else None
        totals[f"compared_{figure}"] = used
        totals[default] = sum(j[default] for j in compared) if compared else None
        totals[saved] = saved_fraction(used, totals[default])
    totals["learning_jobs"] = sum(j["phase"] == "pruning" for j in jobs)
    totals["falling_back_jobs"] = sum(j["fallback"] for j in jobs)
    totals["measurement"] = measurement_label(
        [k for j in jobs for k in j["measurement"].split("+") if k])
    return totals


def report(conn: Connection, job_id: str | None = None,
           since: datetime | None = None) -> list[JobReport]:
    """Every job's current version (or ``job_id``'s), by job id; with ``since``, of the
    tries started at or after it."""
    ids = sorted(job_dags(conn, job_id))
    history = versions(conn, ids)
    chosen = [current(history[j]) for j in ids]
    result = []
    for summary in summaries(conn, chosen, history, since):
        every = runs(conn, summary.version.pk)
        shown = [r for r in every if since is None or r.started_at >= since]
        phase, size = upcoming_batch_size(conn, summary.version)
        result.append(JobReport(summary, phase, size, every[-1] if every else None,
                                Emissions.of(summary, shown)))
    return result
