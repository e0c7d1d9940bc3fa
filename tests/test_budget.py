"""The exploration budget (core/budget.py), and the rules that keep a job's first weeks cheap:
no deterministic retries, no lock-in after a hard day."""

from __future__ import annotations

import dataclasses
import math
from itertools import accumulate
from pathlib import Path

import numpy as np
import pytest

from zeus_airflow.core.budget import affords, budget_status, default_cost_bound
from zeus_airflow.core.config import ConfigError, JobConfig
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import (
    ArmStats,
    BudgetLedger,
    ExplorationStep,
    JobSnapshot,
    RecurrenceKey,
    SizeEvidence,
)
from zeus_airflow.core.engine import Engine
from zeus_airflow.core.policy import (
    DefaultPolicy,
    NoFeasibleBatchSizeError,
    ZeusPolicy,
    earned_another_try,
    frontier,
    job_phase,
)
from zeus_airflow.core.replay_training import ReplayTraining
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.traces import load_workload_trace
from zeus_airflow.sim.simulator import SimulationSpec, job_config

TRACES = Path(__file__).resolve().parents[1] / "zeus_airflow" / "data" / "traces"
RNG = np.random.default_rng(0)


def config(
    budget: float | None = 0.1, sizes: tuple[int, ...] = (8, 16, 32, 64), b0: int = 32
) -> JobConfig:
    return JobConfig("job", sizes, b0, target_metric=0.9, max_epochs=10, exploration_budget=budget)


# --- the books ---------------------------------------------------------------------------------
def test_defaults_cost_is_taken_at_its_lower_bound_and_tightens_with_runs() -> None:
    assert default_cost_bound(BudgetLedger()) is None
    one = default_cost_bound(BudgetLedger(default_costs=(100.0,)))
    many = default_cost_bound(BudgetLedger(default_costs=(100.0,) * 25))
    assert one is not None and many is not None
    assert one < many < 100.0  # pessimistic, less so with evidence


def test_the_allowance_is_one_plus_the_budget_times_defaults_cost_over_the_runs() -> None:
    ledger = BudgetLedger(spent_cost=950.0, recurrences=10, default_costs=(100.0,) * 100)
    status = budget_status(config(0.1), ledger)
    assert status is not None
    bound = default_cost_bound(ledger)
    assert bound is not None
    assert status.allowance == pytest.approx(1.1 * 10 * bound)
    assert affords(status, status.allowance - 950.0) and not affords(status, status.allowance)
    assert status.left_runs() == pytest.approx((status.allowance - 950.0) / bound)
    assert budget_status(config(None), ledger) is None


@pytest.mark.parametrize("value", [-0.1, math.inf, math.nan, "0.1", True])
def test_a_bad_budget_is_refused_naming_the_parameter(value: object) -> None:
    with pytest.raises(ConfigError, match=r"exploration_budget=.* is invalid: expected None"):
        config(value)  # type: ignore[arg-type]


def test_the_budget_does_not_start_a_new_job_version() -> None:
    assert config(0.1).fingerprint() == config(None).fingerprint() == config(0.5).fingerprint()


# --- the policy under a budget -----------------------------------------------------------------
def walked_b0(cost: float = 100.0) -> tuple[ExplorationStep, ...]:
    return (ExplorationStep(32, True, cost, seq=1, stop_reason="target", recurrence="d1"),)


def snapshot(ledger: BudgetLedger, budget: float | None = 0.1) -> JobSnapshot:
    """b0 (32) has run once at cost 100; the walk's next step is 16."""
    return JobSnapshot(
        config(budget),
        exploration=walked_b0(),
        observations={32: ArmStats.of([100.0])},
        success_mean_cost={32: 100.0},
        ledger=ledger,
    )


def test_without_room_in_the_budget_the_best_known_size_runs_instead_of_exploring() -> None:
    tight = BudgetLedger(spent_cost=100.0, recurrences=2, default_costs=(100.0,))
    decision = ZeusPolicy().decide(snapshot(tight), RNG)
    assert (decision.batch_size, decision.phase) == (32, "exploit")
    assert decision.early_stop_cost is None  # the best size always runs to its end
    assert decision.reason and "exploration budget" in decision.reason
    assert decision.budget is not None and decision.budget.left_runs() < 3.0


def test_with_room_for_the_worst_case_the_walk_goes_on() -> None:
    # Savings so far: 20 runs of Default (100 each) done for 60 each.
    roomy = BudgetLedger(spent_cost=1200.0, recurrences=21, default_costs=(100.0,) * 20)
    decision = ZeusPolicy().decide(snapshot(roomy), RNG)
    assert (decision.batch_size, decision.phase) == (16, "pruning")
    # Worst case: stopped at its bound (2 x 100), then the best size again.
    assert decision.budget is not None and decision.budget.left_runs() > 3.0


def test_no_budget_explores_as_the_paper_does() -> None:
    tight = BudgetLedger(spent_cost=100.0, recurrences=2, default_costs=(100.0,))
    decision = ZeusPolicy().decide(snapshot(tight, budget=None), RNG)
    assert (decision.batch_size, decision.phase) == (16, "pruning")


def test_before_defaults_first_complete_run_only_the_default_size_runs() -> None:
    empty = JobSnapshot(config(), ledger=BudgetLedger(recurrences=1))
    decision = ZeusPolicy().decide(empty, RNG)
    assert (decision.batch_size, decision.phase) == (32, "pruning")  # b0 is Default's choice


def paired_costs(budget: float | None, recurrences: int) -> tuple[list[float], list[float]]:
    """Zeus and Default on the same days of a job where every size but b0 misses the target:
    each exploration is the worst case, stopped at its bound and then retried with b0."""
    base = load_workload_trace(TRACES, "v100", "imagenet")
    b0 = base.default_batch_size
    trace = dataclasses.replace(
        base,
        target_epochs={
            b: runs if b == b0 else (math.inf,) for b, runs in base.target_epochs.items()
        },
    )
    costs = []
    for policy in (ZeusPolicy(), DefaultPolicy()):
        gpu = ReplayGPU(trace)
        spec = SimulationSpec("zeus", "v100", "imagenet", 1, str(TRACES), exploration_budget=budget)
        engine = Engine(
            SQLStore.in_memory(), gpu, job_config(trace, spec), policy, seed=1, heartbeat_s=None
        )
        train = ReplayTraining(gpu, seed=1)
        run_costs = []
        for day in range(recurrences):
            train.recurrence = day
            run_costs.append(engine.run_recurrence(train, RecurrenceKey(f"day-{day}")).cost)
        costs.append(run_costs)
    return costs[0], costs[1]


def test_the_budget_holds_at_every_run_when_every_exploration_is_the_worst_case() -> None:
    def worst_ratio(zeus: list[float], default: list[float]) -> float:
        return max(z / d for z, d in zip(accumulate(zeus), accumulate(default), strict=True))

    assert worst_ratio(*paired_costs(0.1, 40)) <= 1.1
    assert worst_ratio(*paired_costs(None, 40)) > 1.5  # the scripted case breaks an unbounded job


# --- no deterministic retries ------------------------------------------------------------------
def test_sizes_that_missed_the_target_in_this_recurrence_are_not_run_again_on_its_data() -> None:
    cfg = config(None, sizes=(16, 32), b0=32)
    steps = (
        ExplorationStep(32, True, 100.0, seq=1, stop_reason="target"),
        ExplorationStep(16, True, 90.0, seq=2, stop_reason="target"),
        ExplorationStep(16, True, 90.0, seq=3, stop_reason="target"),
        ExplorationStep(32, True, 100.0, seq=4, stop_reason="target"),
    )
    observed = {16: ArmStats.of([90.0, 90.0]), 32: ArmStats.of([100.0, 100.0])}
    both_failed = JobSnapshot(
        cfg,
        exploration=steps,
        observations=observed,
        success_mean_cost={16: 90.0, 32: 100.0},
        excluded=frozenset({16, 32}),
    )
    stopped = ZeusPolicy().decide(dataclasses.replace(both_failed, missed=frozenset({32})), RNG)
    assert (stopped.batch_size, stopped.final) == (16, True)  # early-stopped: runs to its end
    with pytest.raises(NoFeasibleBatchSizeError, match="would miss again"):
        ZeusPolicy().decide(dataclasses.replace(both_failed, missed=frozenset({16, 32})), RNG)


# --- no lock-in after a hard day ---------------------------------------------------------------
def hard_day() -> tuple[ExplorationStep, ...]:
    """Day 1: b0 (32), then 16 and 64 all miss the target on hard data."""
    return (
        ExplorationStep(32, False, 300.0, seq=1, stop_reason="max_epochs", recurrence="d1"),
        ExplorationStep(16, False, 300.0, seq=2, stop_reason="max_epochs", recurrence="d1"),
        ExplorationStep(64, False, 300.0, seq=3, stop_reason="max_epochs", recurrence="d1"),
    )


def test_a_hard_day_followed_by_an_easy_one_reopens_exploration() -> None:
    cfg = config(None)
    locked = JobSnapshot(cfg, exploration=hard_day())
    assert job_phase(locked) == ("infeasible", ())
    # Day 2's fallback run of b0 reaches the target: day 1's data was hard, not the sizes.
    easy = JobSnapshot(
        cfg,
        exploration=hard_day(),
        observations={32: ArmStats.of([100.0])},
        success_mean_cost={32: 100.0},
        evidence={32: SizeEvidence(last_success_seq=4)},
    )
    assert earned_another_try(16, easy) and earned_another_try(64, easy)
    phase, in_play = job_phase(easy)
    assert phase == "sampling" and set(in_play) == {16, 32, 64}
    # 8 was never reached: once 16 reaches the target, it is next.
    assert 8 not in in_play
    sixteen_ok = dataclasses.replace(
        easy,
        observations={32: ArmStats.of([100.0]), 16: ArmStats.of([90.0])},
        success_mean_cost={32: 100.0, 16: 90.0},
        evidence={32: SizeEvidence(last_success_seq=4), 16: SizeEvidence(last_success_seq=5)},
    )
    assert 8 in job_phase(sixteen_ok)[1]
    assert ZeusPolicy().decide(sixteen_ok, RNG).batch_size == 8  # untried arms go first


def test_a_miss_on_a_day_no_later_run_overturned_still_prunes() -> None:
    cfg = config(None)
    steps = (
        ExplorationStep(32, True, 100.0, seq=1, stop_reason="target", recurrence="d1"),
        ExplorationStep(16, False, 300.0, seq=2, stop_reason="max_epochs", recurrence="d2"),
    )
    snap = JobSnapshot(
        cfg,
        exploration=steps,
        observations={32: ArmStats.of([100.0])},
        success_mean_cost={32: 100.0},
    )
    assert not earned_another_try(16, snap)
    assert frontier(snap, [32]) == {64}  # 64 is the walk's next step anyway; 8 lies past 16
