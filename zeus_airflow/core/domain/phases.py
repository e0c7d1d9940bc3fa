"""Why a trial ran: the phase of the decision that started it."""

from __future__ import annotations

from typing import Literal

Phase = Literal[
    "pruning", "sampling", "calibrate", "concurrent", "fallback", "default", "grid", "exploit"
]
"""``pruning``: a step of the pruning walk. ``sampling``: Thompson sampling among the sizes in
play. ``calibrate``: the first run of a surviving size on a GPU model the job has not used it
on, whose observations from other models cannot be translated before it is profiled here.
``concurrent``: pruning was busy elsewhere, so the best size known so far ran. ``fallback``:
no batch size is left in play; the best known one trains as it would without Zeus (the GPU's
current limit, no early-stop bound), so the pipeline still gets its model. ``exploit``:
exploring would have taken the job past its exploration budget, so the best known size ran
(``core/decide/budget.py``); also the grid-search baseline's phase once its grid is done.
``default``, ``grid``: the simulator's baselines."""

EXPLORATION_PHASES: tuple[Phase, ...] = ("pruning", "grid")
"""Phases whose trials are steps of an exploration walk: judged by whether they reached the
target, and replayed in order to find where the walk stands."""


def counts_as_observation(phase: str, reached_target: bool, stop_reason: str | None = None) -> bool:
    """Whether a finished trial's cost feeds its arm's posterior.

    A failed exploration trial prunes its batch size instead; a failed sampling trial's cost
    (stopped at the early-stop bound, so clearly worse than the best) is evidence about it.
    A try stopped at the exploration budget's cap is neither: its cost is only a lower
    bound of what the size costs (censored).
    """
    if stop_reason == "budget_cap":
        return False
    return reached_target or phase not in EXPLORATION_PHASES


def shown_job_phase(job_phase: str | None, decision_phase: str | None) -> str:
    """The job's phase as the fleet page, the job page, ``report`` and ``runs`` show it: the
    one its policy recorded after its latest try that has one (``Policy.job_phase``:
    ``pruning``, ``sampling`` or ``infeasible``, no size in play); else (a store from before
    revision 0013, a baseline's history) its latest decision's phase; ``pruning`` before any
    try (the walk has not begun)."""
    return job_phase or decision_phase or "pruning"


def falls_back(shown_phase: str, decision_phase: str | None) -> bool:
    """Whether the job's runs fall back to the best known size: its phase
    (:func:`shown_job_phase`) says no size is in play, or its latest decision fell back."""
    return shown_phase == "infeasible" or decision_phase == "fallback"
