"""The best batch size so far, as the policy reckons it: what it costs, the early-stop bound
it sets, the size a retry or a fallback runs; and the error when no size is left to run."""

from __future__ import annotations

from collections.abc import Callable

from zeus_airflow.core.domain import JobSnapshot


class NoFeasibleBatchSizeError(RuntimeError):
    """No batch size is left to try, and the job was asked to fail rather than train anyway."""


def _best_success_cost(snapshot: JobSnapshot) -> float | None:
    """A robust estimate of the best achievable cost: the lowest per-size *mean* of successful
    runs. Not the lowest single run: one lucky run would early-stop every other size."""
    return min(snapshot.success_mean_cost.values(), default=None)


def early_stop_bound(snapshot: JobSnapshot) -> float | None:
    """Training cost above which a try stops: ``beta x`` :func:`_best_success_cost`."""
    best = _best_success_cost(snapshot)
    return None if best is None else snapshot.config.beta * best


def best_success_size(snapshot: JobSnapshot) -> int:
    """The size whose successful runs cost least on average; b0 when none succeeded, unless
    b0 trains nothing on the job's data (its latest walk step stopped ``no_steps``): then
    the size the walk last saw train."""
    means = snapshot.success_mean_cost
    if means:
        return min(means, key=lambda b: means[b])
    b0 = snapshot.config.default_batch_size
    walk = snapshot.exploration[::-1]  # latest first
    if next((s.stop_reason for s in walk if s.batch_size == b0), None) != "no_steps":
        return b0
    return next((s.batch_size for s in walk if s.stop_reason != "no_steps"), b0)


def best_known(snapshot: JobSnapshot, candidates: tuple[int, ...]) -> int:
    """The cheapest candidate that has not failed in this recurrence (see :func:`cheapest`)."""
    allowed = tuple(b for b in candidates if b not in snapshot.excluded)
    return cheapest(snapshot, allowed or candidates)


def cheapest(snapshot: JobSnapshot, candidates: tuple[int, ...]) -> int:
    """The candidate with the lowest mean observed cost; b0 (else the first) when none has
    been observed."""
    observed = {
        b: snapshot.observations[b].mean
        for b in candidates
        if b in snapshot.observations and snapshot.observations[b].count
    }
    if observed:
        return min(observed, key=lambda b: observed[b])
    b0 = snapshot.config.default_batch_size
    return b0 if b0 in candidates else candidates[0]


def bound_for(snapshot: JobSnapshot) -> Callable[[int], float | None]:
    """The early-stop bound a size runs under: :func:`early_stop_bound`, except for the size
    whose mean successful cost sets it, which always runs to its end. The bound exists to cut
    short sizes that cannot beat the best one; stopping the best one itself (on a day whose
    data needs more epochs, on a busy machine) only adds a restart at a costlier size."""
    bound = early_stop_bound(snapshot)
    best = best_success_size(snapshot) if snapshot.success_mean_cost else None
    return lambda batch_size: None if batch_size == best else bound
