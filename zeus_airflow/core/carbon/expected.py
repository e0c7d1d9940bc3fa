"""How long, and how much energy, the job's next run is expected to take: from its history.

The configuration the policy is about to choose is the pruning walk's next batch size while
it prunes, else its best known one (Thompson sampling exploits it most often; see
``reports.arms.upcoming_batch_size``). The expectation is the mean of the job's recent
finished runs that began with that size: whole runs, so failed tries, later sizes and
profiling count, as they will again. Setup before training is added in (it is wall time and
energy too). Without such runs (a size the walk has not tried yet), the mean of its recent
finished runs; without any, the DAG's own guess (``expected_duration``), with no energy.
"""

from __future__ import annotations

from zeus_airflow.core import reports
from zeus_airflow.core.carbon.planner import ExpectedRun
from zeus_airflow.core.reports.arms import upcoming_batch_size
from zeus_airflow.core.store.reads import Reader

RECENT_RUNS = 10
"""Runs averaged: recent enough to follow drift, enough to steady the mean."""


def expected_run(reader: Reader, job_id: str, guess_s: float | None) -> ExpectedRun | None:
    """The expectation for the job's active version; None with neither history nor guess."""
    history = reader.versions([job_id]).get(job_id)
    if history:
        version = reports.current(history)
        done = [
            r
            for r in reports.runs(reader, version.pk)
            if r.energy_j is not None
            and r.time_s is not None
            and r.status in ("succeeded", "failed")
        ]
        phase, upcoming = upcoming_batch_size(reader, version)
        at_size = [r for r in done if r.batch_sizes[0] == upcoming]
        chosen, what = (
            (at_size, f"b={upcoming}, next in {phase}")
            if at_size
            else (
                done,
                f"any batch size (b={upcoming}, next in {phase}, has no run yet)"
                if upcoming is not None
                else "any batch size",
            )
        )
        chosen = chosen[-RECENT_RUNS:]
        if chosen:
            time_s = sum((r.time_s or 0.0) + (r.setup_time_s or 0.0) for r in chosen)
            energy_j = sum(r.energy_with_setup_j() for r in chosen)
            n = len(chosen)
            measurement = chosen[-1].measurement
            note = "" if measurement == "measured" else f", {measurement}"
            return ExpectedRun(
                time_s / n, energy_j / n, f"mean of the job's last {n} run(s) at {what}{note}"
            )
    if guess_s is None:
        return None
    return ExpectedRun(guess_s, None, "expected_duration given by the DAG (no runs yet)")
