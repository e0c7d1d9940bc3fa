"""Drift detection (core/decide/drift.py) and the policy rules that use it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from fixtures_airflow import TRACES

from zeus_airflow.core.common.config import ConfigError, JobConfig
from zeus_airflow.core.decide.drift import CHANGE_Z, MIN_SEGMENT, arm_view, change_point
from zeus_airflow.core.decide.in_play import job_phase
from zeus_airflow.core.decide.policy import ZeusPolicy
from zeus_airflow.core.decide.posterior import PRIOR_COST_CV
from zeus_airflow.core.decide.sampling import stale_neighbour
from zeus_airflow.core.decide.walk import pruning_state
from zeus_airflow.core.domain import (
    ArmStats,
    DriftFound,
    ExplorationStep,
    JobSnapshot,
    Observed,
    SizeEvidence,
)
from zeus_airflow.sim.drift import Drift, DriftSpec, run_drift


def history(costs: list[float], start: int = 0, reached: bool = True) -> list[Observed]:
    return [Observed(start + i, c, reached) for i, c in enumerate(costs)]


# --- change points ----------------------------------------------------------------------------
def test_a_lasting_shift_is_a_change_point_and_noise_is_not() -> None:
    steady = [10.0, 10.3, 9.8, 10.1, 9.9, 10.2] * 5
    assert change_point(steady) is None
    assert change_point(steady + [14.0] * 4) == len(steady)  # 1.4x, four runs in a row
    assert change_point(steady + [6.0] * 4) == len(steady)  # cheaper counts too
    assert change_point(steady + [14.0] * (MIN_SEGMENT - 1)) is None  # too few runs yet
    assert change_point(steady + [14.0] * MIN_SEGMENT) is None  # 1.4x is 2.9 spreads: 3 runs
    # give 4.9 standard errors, short of CHANGE_Z


def test_runs_of_unlucky_epochs_are_not_a_drift() -> None:
    # Replayed epochs-to-target are discrete: a seed that needs 6 epochs instead of 4 costs
    # 1.5x, and three such runs in a row happen (movielens-1m, seed 5 of the sweep).
    costs = [6.5, 6.5, 6.5, 11.3, 6.5, 8.1, 6.5, 6.5, 6.5, 6.5, 6.5, 6.5, 11.3, 11.3, 11.3]
    assert change_point(costs) is None
    # Identical costs leave no spread: the prior 14 % is a floor, so 25 % twice is noise.
    assert change_point([0.99] * 37 + [1.24, 1.24]) is None


def test_a_smaller_shift_needs_more_runs_to_be_found() -> None:
    steady = [10.0] * 40
    assert change_point(steady + [13.0] * 5) is None
    assert change_point(steady + [13.0] * 8) == 40
    # Under one prior spread (14 %) no split of DRIFT_MEMORY runs reaches CHANGE_Z: the
    # detection leaves such drifts to the posterior, as no window would.
    assert CHANGE_Z * PRIOR_COST_CV / math.sqrt(100 / 4) == pytest.approx(PRIOR_COST_CV)
    assert change_point([10.0] * 50 + [11.3] * 50) is None


# --- what the posteriors use after a change ------------------------------------------------------
def test_without_a_change_every_arm_keeps_its_whole_memory() -> None:
    view = arm_view({8: history([10.0, 11.0, 10.5]), 16: history([20.0, 21.0], start=10)})
    assert view.drift is None
    assert view.observations[8] == ArmStats.of([10.0, 11.0, 10.5])
    assert view.successes == {8: (31.5, 3), 16: (41.0, 2)}


def test_a_change_keeps_new_costs_and_makes_old_ones_stale() -> None:
    changed = history([10.0] * 20 + [15.0] * 6)  # seqs 0-25, change at seq 20
    fresh = history([12.0, 12.0, 18.0], start=19)  # one run before the change, two after
    old = history([11.0, 13.0], start=2)  # nothing since the change
    view = arm_view({8: changed, 16: fresh, 32: old})
    assert view.drift is not None and view.drift.since == 20
    assert view.drift.cost_ratio == pytest.approx(1.5)
    assert view.observations[8] == ArmStats.of([15.0] * 6)
    assert view.observations[16] == ArmStats.of([12.0, 18.0])  # only what ran since
    assert 32 not in view.observations
    # 32's old mean moved as its nearest size with costs on both sides of the change moved
    # (16: 12 before, 15 after), with half the job-wide change as its spread.
    assert view.drift.stale_mean == {32: pytest.approx(1.25 * 12.0)}
    assert view.drift.stale_spread == pytest.approx(math.log(1.5) / 2)
    # The early-stop bound comes from costs that still describe the data.
    assert view.successes == {8: (90.0, 6), 16: (30.0, 2)}


def test_a_stale_size_moves_like_its_neighbours_not_like_the_size_in_use() -> None:
    """A drift that favours larger batches: 8 got 1.6x dearer, 32 0.9x. 16, between them
    and not run since, is believed to have moved between the two, not by 8's 1.6x (the size
    the job was training), which would hide that it may now be the cheapest."""
    eight = history([10.0] * 20 + [16.0] * 10)
    thirty_two = history([20.0, 20.0], start=2) + history([18.0, 18.0], start=22)
    view = arm_view({8: eight, 16: history([12.0], start=1), 32: thirty_two})
    assert view.drift is not None and view.drift.since == 20
    assert view.drift.stale_mean == {16: pytest.approx(12.0 * math.sqrt(1.6 * 0.9))}
    # With no size on one side, the nearest one's change; with none at all, the job's.
    alone = arm_view({8: eight, 16: history([12.0], start=1)})
    assert alone.drift is not None
    assert alone.drift.stale_mean == {16: pytest.approx(12.0 * 1.6)}


def test_with_no_success_since_the_change_the_old_ones_keep_a_bound() -> None:
    changed = history([10.0] * 20) + history([15.0] * 6, start=20, reached=False)
    view = arm_view({8: changed, 32: history([11.0, 13.0], start=2)})
    assert view.drift is not None
    assert view.successes == {32: (24.0, 2)}


# --- the policy under drift detection -------------------------------------------------------------
def detecting(sizes: tuple[int, ...] = (8, 16, 32), b0: int = 16) -> JobConfig:
    return JobConfig(
        "job",
        sizes,
        b0,
        target_metric=0.9,
        max_epochs=10,
        drift_detection=True,
        exploration_budget=None,
    )


def walk(cfg: JobConfig, cost: dict[int, float]) -> tuple[ExplorationStep, ...]:
    steps: list[ExplorationStep] = []
    while (b := pruning_state(cfg, tuple(steps)).next_batch_size) is not None:
        steps.append(ExplorationStep(b, True, cost[b], seq=len(steps)))
    return tuple(steps)


def test_a_size_dropped_as_dominated_returns_after_a_drift_and_stays() -> None:
    cfg = detecting()
    steps = walk(cfg, {8: 14.0, 16: 10.0, 32: 10.4})
    assert [s.batch_size for s in steps] == [16, 8, 32, 16, 32]  # round 2 passes 8 over
    quiet = JobSnapshot(cfg, exploration=steps, observations={8: ArmStats.of([14.0])})
    assert job_phase(quiet)[1] == (16, 32)
    drifted = dataclasses.replace(quiet, drift=DriftFound(since=7, cost_ratio=1.4))
    assert job_phase(drifted)[1] == (8, 16, 32)  # judged on the old data: back in play
    # Once run since the walk ended (sampled), it stays an arm after the change has left
    # the detection's memory.
    sampled = dataclasses.replace(
        quiet, observations={8: ArmStats.of([14.0, 9.0])}, run_since_walk=frozenset({8})
    )
    assert job_phase(sampled)[1] == (8, 16, 32)
    # Runs before the walk ended do not count: a budgeted job runs its default size on
    # every day of its first week, and that is no sampling.
    exploited = dataclasses.replace(quiet, observations={8: ArmStats.of([14.0, 9.0, 13.0])})
    assert job_phase(exploited)[1] == (16, 32)
    # Without drift detection a dominated size stays dropped, drift or not.
    plain = dataclasses.replace(drifted, config=dataclasses.replace(cfg, drift_detection=False))
    assert job_phase(plain)[1] == (16, 32)


def test_thompson_sampling_draws_stale_arms_from_their_belief() -> None:
    cfg = detecting((8, 16, 32, 64))
    steps = walk(cfg, {8: 10.5, 16: 10.0, 32: 10.4, 64: 10.6})
    # 16 and 32 ran since the change; 8 and 64 did not, and neither is 16's neighbour with
    # a belief under the bound (8's is beyond it, 64 is 32's neighbour): no re-check.
    observations = {16: ArmStats.of([14.0, 14.2, 13.9, 14.1]), 32: ArmStats.of([14.6, 14.4, 14.5])}
    snapshot = JobSnapshot(
        cfg,
        exploration=steps,
        observations=observations,
        success_mean_cost={16: 14.0, 32: 14.5},
        drift=DriftFound(
            since=5, cost_ratio=1.4, stale_mean={8: 100.0, 64: 13.0}, stale_spread=0.04
        ),
    )
    assert stale_neighbour(snapshot, [8, 16, 32, 64]) is None
    rng = np.random.default_rng(1)
    picks = [ZeusPolicy().decide(snapshot, rng).batch_size for _ in range(200)]
    # An arm with no cost since the change is not tried blindly first: 8's belief says it
    # is far dearer, 64's that it is likely the cheapest now.
    assert 8 not in picks
    assert picks.count(64) > 150


def test_after_a_change_the_cheapest_sizes_stale_neighbours_are_checked_once() -> None:
    cfg = detecting((8, 16, 32, 64))
    steps = walk(cfg, {8: 10.5, 16: 10.0, 32: 10.4, 64: 10.6})
    # Only 16 ran since the change (1.4x dearer); 32's belief (an old pruning cost moved as
    # 16 moved) says 20.2: Thompson sampling would rarely draw it below 16's 14.
    drift = DriftFound(
        since=5, cost_ratio=1.4, stale_mean={8: 14.7, 32: 20.2, 64: 60.0}, stale_spread=0.17
    )
    snapshot = JobSnapshot(
        cfg,
        exploration=steps,
        observations={16: ArmStats.of([14.0, 14.2, 13.9, 14.1])},
        success_mean_cost={16: 14.0},
        drift=drift,
    )
    rng = np.random.default_rng(1)
    decision = ZeusPolicy().decide(snapshot, rng)
    assert decision.batch_size == 8  # both neighbours are under the bound (28): 8 first
    assert decision.early_stop_cost == 28.0  # a check is cut at the bound like any try
    checked_8 = dataclasses.replace(
        snapshot, observations={**snapshot.observations, 8: ArmStats.of([15.0])}
    )
    assert ZeusPolicy().decide(checked_8, rng).batch_size == 32
    # 32 turned out the cheapest: its stale neighbour 64 is next, but its belief is beyond
    # the bound, so sampling goes on as usual.
    checked_32 = dataclasses.replace(
        checked_8,
        observations={**checked_8.observations, 32: ArmStats.of([9.0])},
        success_mean_cost={16: 14.0, 32: 9.0},
    )
    assert stale_neighbour(checked_32, [8, 16, 32, 64]) is None
    # A neighbour another worker is checking now is not checked twice; without a change
    # found, nothing is checked.
    busy = dataclasses.replace(snapshot, in_flight=(8,))
    assert stale_neighbour(busy, [8, 16, 32, 64]) == 32
    assert stale_neighbour(dataclasses.replace(snapshot, drift=None), [8, 16, 32, 64]) is None


def test_a_drift_does_not_pass_for_a_grown_bound() -> None:
    # 8 was early-stopped at 20 when the best mean was 10. After a drift that made every
    # size 1.5x dearer, the bound is 30: it grew with the costs, not because 10 was lucky.
    cfg = detecting((8, 16), 16)
    steps = (
        ExplorationStep(16, True, 10.0, seq=0),
        ExplorationStep(8, False, 20.0, seq=1, stop_reason="early_stop", early_stop_cost=20.0),
        ExplorationStep(16, True, 10.0, seq=2),
    )
    snapshot = JobSnapshot(
        cfg, exploration=steps, success_mean_cost={16: 15.0}, evidence={8: SizeEvidence(None, 20.0)}
    )
    assert job_phase(snapshot)[1] == (8, 16)  # no drift known: the grown bound readmits it
    drifted = dataclasses.replace(snapshot, drift=DriftFound(since=3, cost_ratio=1.5))
    assert job_phase(drifted)[1] == (16,)


def test_drift_detection_is_a_checked_bool_that_keeps_the_job_version() -> None:
    cfg = JobConfig("j", (8, 16), 16, target_metric=0.9, max_epochs=10, exploration_budget=None)
    assert dataclasses.replace(cfg, drift_detection=True).fingerprint() == cfg.fingerprint()
    with pytest.raises(
        ConfigError, match="drift_detection='yes' is invalid: expected True or False"
    ):
        dataclasses.replace(cfg, drift_detection="yes")


# --- end to end on the replayed traces ----------------------------------------------------------
def drift_at_80(
    gpu: str, workload: str, recurrences: int, drift: Drift, job: dict[str, object]
) -> DriftSpec:
    """Seed 1 of ``gpu`` ``workload``, its data drifting as ``drift`` says at recurrence 80."""
    return DriftSpec(
        gpu,
        workload,
        str(TRACES),
        seed=1,
        switch_at=80,
        recurrences=recurrences,
        drift=drift,
        job=job,
    )


def test_drift_detection_adapts_where_no_window_does_not() -> None:
    """V100 cifar100, the default drift: 128 turns 1.4x dearer and 256 is the new optimum."""
    spec = drift_at_80(
        "v100", "cifar100", 150, Drift(2.0, 1.5), {"window_size": None, "exploration_budget": None}
    )
    plain = run_drift(spec)
    detected = run_drift(dataclasses.replace(spec, job={**spec.job, "drift_detection": True}))
    assert detected.can_adapt
    assert detected.adaptation_delay is not None and plain.adaptation_delay is not None
    assert detected.adaptation_delay < plain.adaptation_delay
    assert detected.regret_after_switch < plain.regret_after_switch
    # Before the drift the two made the same decisions: detection found nothing there.
    assert detected.batch_size[:80] == plain.batch_size[:80]


def test_a_size_priced_out_before_a_drift_is_priced_again_after_it() -> None:
    """A40 imagenet, batch_scale 2 at difficulty 1.2, with the default budget: before the
    drift 360 costs within 2 % of the optimum 256, so its price could not pay back a try and
    the walk never got past it; after the drift 360 is 20 % cheaper than 256, and 512 is the
    optimum. The price is made again with the drift's spread (how far it may have moved
    sizes apart), 360 is tried, and the frontier beyond it finds 512. Before, the job never
    left 192 and 256."""
    result = run_drift(
        drift_at_80("a40", "imagenet", 130, Drift(2.0, 1.2), {"drift_detection": True})
    )
    assert result.optima.after.batch_size == 512
    assert 360 not in result.survivors_at_switch and 512 not in result.batch_size[:80]
    assert result.adaptation_delay is not None and result.adaptation_delay < 20
