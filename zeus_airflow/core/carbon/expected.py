"""How long, and how much energy, the job's next run is expected to take: from its history.

The configuration the policy is about to choose is the pruning walk's next batch size while
it prunes, else its best known one (Thompson sampling exploits it most often; see
``core/decide/outlook.py``, read from the snapshot the policy decides with). The expectation is the
mean of the job's recent finished runs that began with that size: whole runs, so failed
tries, later sizes and profiling count, as they will again. Setup before training is added in
(it is wall time and energy too). Without such runs (a size the walk has not tried yet), the
mean of its recent finished runs; without any, or when they took under a second (no
expectation of a span: ``ExpectedRun.instant``), the DAG's own guess (``expected_duration``),
with no energy; without a guess, the short expectation, on which the plan weighs the
intensity alone and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zeus_airflow.core.carbon.planner import MIN_EXPECTED_S, ExpectedRun
from zeus_airflow.core.decide import outlook
from zeus_airflow.core.decide.snapshot import job_snapshot
from zeus_airflow.core.domain import PastRun, energy_with_setup_j, time_with_setup_s
from zeus_airflow.core.store.reads import JobPast

if TYPE_CHECKING:
    from zeus_airflow.core.store.base import Store

RECENT_RUNS = 10
"""Runs averaged: recent enough to follow drift, enough to steady the mean."""


def expected_run(store: Store, job_id: str, guess_s: float | None) -> ExpectedRun | None:
    """The expectation for the job's active version; None with neither history nor guess."""
    with store.reader() as reader:
        past = reader.job_past(job_id)
    learned = None if past is None else _learned(past)
    if learned is not None and not learned.instant:
        return learned
    if guess_s is None:  # a run too short to expect one by: the plan says so (``instant``)
        return learned
    why = "no runs yet" if learned is None else f"{learned.basis}, under {MIN_EXPECTED_S:g} s"
    return ExpectedRun(guess_s, None, f"expected_duration given by the DAG ({why})")


def _learned(past: JobPast) -> ExpectedRun | None:
    try:
        phase, upcoming = outlook.upcoming(job_snapshot(past.state))
    except outlook.OutOfOrder:  # another policy's history: no size to expect
        phase, upcoming = "", None
    done = past.finished
    # Runs that began with the size: their first decision was the one the next run's will be.
    at_size = [r for r in done if r.first_batch_size == upcoming]
    chosen: list[PastRun] | tuple[PastRun, ...]
    if at_size:
        chosen, what = at_size, f"b={upcoming}, next in {phase}"
    elif upcoming is not None:
        chosen, what = done, f"any batch size (b={upcoming}, next in {phase}, has no run yet)"
    else:
        chosen, what = done, "any batch size"
    chosen = chosen[-RECENT_RUNS:]
    if not chosen:
        return None
    time_s = sum(time_with_setup_s(r) for r in chosen)
    energy_j = sum(energy_with_setup_j(r) for r in chosen)
    n = len(chosen)
    measurement = chosen[-1].measurement
    note = "" if measurement == "measured" else f", {measurement}"
    return ExpectedRun(
        time_s / n, energy_j / n, f"mean of the job's last {n} run(s) at {what}{note}"
    )
