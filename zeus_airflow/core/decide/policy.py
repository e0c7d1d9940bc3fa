"""Batch-size policies: Zeus (pruning, then Thompson sampling) and the paper's baselines.

A policy is pure: it reads a :class:`~zeus_airflow.core.domain.JobSnapshot` (the engine
builds it from the state the store read inside its decision transaction, ``snapshot.job_snapshot``)
and returns a :class:`~zeus_airflow.core.domain.Decision`. It never touches the database or a
device, so the same code decides in the simulator, the operator and the tests, and any worker
can decide for any job.

The Zeus policy's steps live beside it in ``core/decide/``: ``walk.py`` (the pruning walk),
``in_play.py`` (the sizes in play after it, second tries, the phase), ``sampling.py``
(Thompson sampling), ``exploring.py`` (a try within the exploration budget), ``best.py``
(the best size so far and its early-stop bound) and ``parameters.py`` (its tuning).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from zeus_airflow.core.decide.best import (
    NoFeasibleBatchSizeError,
    best_known,
    best_success_size,
    bound_for,
    cheapest,
    early_stop_bound,
)
from zeus_airflow.core.decide.exploring import within_budget
from zeus_airflow.core.decide.in_play import infeasibility_report, sizes_in_play
from zeus_airflow.core.decide.in_play import job_phase as zeus_job_phase
from zeus_airflow.core.decide.parameters import DEFAULT_PARAMETERS, PolicyParameters
from zeus_airflow.core.decide.sampling import thompson_sample
from zeus_airflow.core.decide.walk import HistoryOutOfOrderError, walk_order, walk_state
from zeus_airflow.core.domain import ArmStats, Decision, JobSnapshot, Phase


class Policy(Protocol):
    name: str
    has_job_phase: bool
    """Whether :meth:`job_phase` says anything: only then does the engine read the job's
    state after each try to record it."""

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision: ...

    def job_phase(self, snapshot: JobSnapshot) -> str | None:
        """Where the job stands, for people (None: the policy has no phase beyond its
        decisions'); the engine records it after each try."""
        ...


class ZeusPolicy:
    """Pruning exploration, then Gaussian Thompson sampling over the sizes in play.

    ``fallback``: with no size left in play, train the best known one anyway (phase
    ``fallback``); False raises :class:`NoFeasibleBatchSizeError` instead, before any trial
    starts, for users who want such a job to fail its task. ``params``: its tuning.
    """

    name = "zeus"
    has_job_phase = True

    def __init__(
        self, fallback: bool = True, params: PolicyParameters = DEFAULT_PARAMETERS
    ) -> None:
        self.fallback = fallback
        self.params = params

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        try:
            explored = self._explore(snapshot, rng)
        except HistoryOutOfOrderError as err:
            return _edited_history(snapshot, err)
        return within_budget(snapshot, explored)

    def job_phase(self, snapshot: JobSnapshot) -> str | None:
        """``pruning``, ``sampling`` or ``infeasible`` (no size in play: runs fall back);
        None on a history another policy wrote (the simulator's baselines)."""
        try:
            return zeus_job_phase(snapshot, self.params)[0]
        except HistoryOutOfOrderError:
            return None

    def _explore(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        """What the paper's policy, with our edge cases, would run next, budget aside."""
        state = walk_state(snapshot, self.params)
        bound = bound_for(snapshot)
        if state.next_batch_size is not None:
            b = state.next_batch_size
            if b in snapshot.in_flight or b in snapshot.excluded:
                # Its outcome is pending (or known bad now): while pruning, overlapping runs
                # take the best size known so far instead of exploring blindly (paper §4.4);
                # a retry after the budget stopped it delivers the model with it.
                best = best_known(snapshot, state.survivors)
                if best in snapshot.missed:
                    raise NoFeasibleBatchSizeError(_missed_again(snapshot, best))
                busy: Phase = "concurrent" if b in snapshot.in_flight else "exploit"
                return Decision(best, busy, early_stop_cost=bound(best))
            return Decision(b, "pruning", early_stop_cost=bound(b))
        in_play = sizes_in_play(snapshot, state, self.params)
        if not in_play:
            fallback = best_success_size(snapshot)
            # Already run in this recurrence: without a bound (nothing had succeeded yet),
            # so the recurrence has its model; running it again would double the cost.
            if not self.fallback or fallback in snapshot.excluded:
                raise NoFeasibleBatchSizeError(infeasibility_report(snapshot, self.params))
            return Decision(
                fallback,
                "fallback",
                keep_power_limit=True,
                final=True,
                reason=infeasibility_report(snapshot, self.params),
            )
        arms = [b for b in in_play if b not in snapshot.excluded]
        if not arms:
            # Every size in play failed in this recurrence. After a drift all of them can
            # exceed a bound measured before it, so run the cheapest to the end: the
            # recurrence still yields a model, and its full cost tells the window what changed.
            # Not one that missed the target within max epochs: on the same data it would
            # miss again, at the same cost.
            stopped = tuple(b for b in in_play if b not in snapshot.missed)
            if not stopped:
                raise NoFeasibleBatchSizeError(_missed_again(snapshot, *in_play))
            return Decision(cheapest(snapshot, stopped), "sampling", final=True)
        if snapshot.excluded:
            # A retry: this recurrence already paid for a failed try. Deliver the model with
            # the size known to be cheapest among those left, rather than explore now.
            choice = best_known(snapshot, tuple(arms))
        else:
            choice = thompson_sample(snapshot, arms, rng)
        observed_here = snapshot.observations.get(choice, ArmStats(0, 0.0, 0.0)).count > 0
        phase: Phase = (
            "sampling" if observed_here or choice not in snapshot.foreign_costs else "calibrate"
        )
        return Decision(choice, phase, early_stop_cost=bound(choice))


def _edited_history(snapshot: JobSnapshot, err: HistoryOutOfOrderError) -> Decision:
    """The default size as the DAG runs it without Zeus (its current limit, no bound) when
    the exploration history cannot be the walk's: a row no worker wrote (forged, a bad
    restore) must not fail every run of the job (issue 48)."""
    b0, job_id = snapshot.config.default_batch_size, snapshot.config.job_id
    if b0 in snapshot.excluded:
        raise NoFeasibleBatchSizeError(f"{err}; the default batch size already ran")
    return Decision(
        b0,
        "fallback",
        keep_power_limit=True,
        final=True,
        reason=(
            f"{err}: the default batch size {b0} runs as without Zeus until the rows that "
            f"broke it are repaired (see them with `zeus-airflow runs --job {job_id} --wide`; "
            f"drop those that are no real try with `zeus-airflow drop-trials --job {job_id} "
            "--trial N`)"
        ),
    )


def _missed_again(snapshot: JobSnapshot, *sizes: int) -> str:
    """Why a recurrence ends rather than run ``sizes`` again."""
    return (
        f"batch size {', '.join(map(str, sizes))} missed target_metric="
        f"{snapshot.config.target_metric} within max_epochs={snapshot.config.max_epochs} "
        "in this recurrence; run again on the same data it would miss again"
    )


class DefaultPolicy:
    """Baseline: the default batch size at the maximum power limit, every time."""

    name = "default"
    has_job_phase = False

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        limit = max(snapshot.power_limits_w) if snapshot.power_limits_w else None
        # The DAG without Zeus runs once a recurrence, whether or not it reaches the target.
        return Decision(
            snapshot.config.default_batch_size, "default", power_limit_w=limit, final=True
        )

    def job_phase(self, snapshot: JobSnapshot) -> str | None:
        return None  # a baseline has no phase beyond its decisions'


class GridSearchPolicy:
    """Baseline: one (batch size, power limit) per recurrence, batch sizes in the pruning walk
    order (a size that fails ends its direction), then the cheapest pair seen, for good."""

    name = "grid"
    has_job_phase = False

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        config, limits = snapshot.config, snapshot.power_limits_w
        if not limits:
            raise ValueError("grid search needs the device's candidate power limits")
        tried = {(s.batch_size, s.power_limit_w): s for s in snapshot.exploration}
        bound = early_stop_bound(snapshot)
        outcome: dict[int, bool] = {}
        for b in walk_order(config.batch_sizes, config.default_batch_size, outcome):
            for p in limits:
                step = tried.get((b, p))
                if step is None:
                    return Decision(b, "grid", power_limit_w=p, early_stop_cost=bound)
                if not step.succeeded:
                    outcome[b] = False
                    break
            else:
                outcome[b] = True
        done = [s for s in snapshot.exploration if s.succeeded]
        if not done:
            raise NoFeasibleBatchSizeError(
                "grid search found no (batch size, power limit) that reaches the target"
            )
        best = min(done, key=lambda s: s.cost)
        return Decision(
            best.batch_size, "exploit", power_limit_w=best.power_limit_w, early_stop_cost=bound
        )

    def job_phase(self, snapshot: JobSnapshot) -> str | None:
        return None  # a baseline has no phase beyond its decisions'


POLICIES: dict[str, type[ZeusPolicy] | type[DefaultPolicy] | type[GridSearchPolicy]] = {
    "zeus": ZeusPolicy,
    "default": DefaultPolicy,
    "grid": GridSearchPolicy,
}
