"""The exploration budget (core/decide/budget.py), and the rules that keep a job's first weeks
cheap: no deterministic retries, no lock-in after a hard day."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from itertools import accumulate
from typing import Any

import numpy as np
import pytest
from paths import REPO

from zeus_airflow.core.common.config import ConfigError, JobConfig
from zeus_airflow.core.common.cost import zeus_cost
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.decide.budget import (
    ProfilingCredit,
    budget_after,
    budget_status,
    cannot_beat,
    cost_range,
    profiling_credit,
    unknown_default_bound,
)
from zeus_airflow.core.decide.exploring import (
    may_explore_now,
    needed_cap,
    priced_exploit,
    verdict_cost,
)
from zeus_airflow.core.decide.in_play import earned_another_try, frontier, job_phase
from zeus_airflow.core.decide.policy import DefaultPolicy, NoFeasibleBatchSizeError, ZeusPolicy
from zeus_airflow.core.decide.walk import pruning_state
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import (
    ArmStats,
    BudgetCap,
    BudgetLedger,
    CensoredTry,
    CostReference,
    Decision,
    ExplorationStep,
    JobSnapshot,
    RecurrenceKey,
    RunOutcome,
    SizeEvidence,
)
from zeus_airflow.core.reports import runs
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.core.train.run import open_run
from zeus_airflow.operators.summary import summary_line
from zeus_airflow.sim.simulator import SimulationSpec, job_config

TRACES = REPO / "zeus_airflow" / "data" / "traces"
RNG = np.random.default_rng(0)


def config(
    budget: float | None = 0.1, sizes: tuple[int, ...] = (8, 16, 32, 64), b0: int = 32
) -> JobConfig:
    return JobConfig("job", sizes, b0, target_metric=0.9, max_epochs=10, exploration_budget=budget)


# --- the books ---------------------------------------------------------------------------------
def test_defaults_unknown_costs_are_taken_low_and_less_so_with_evidence() -> None:
    few = BudgetLedger(default_costs=(100.0, 120.0))
    many = BudgetLedger(default_costs=(100.0, 120.0) * 20)
    assert unknown_default_bound(few, 0) == 0.0
    assert unknown_default_bound(few, 5) < unknown_default_bound(many, 5) < 5 * 110.0
    # Per recurrence, the bound rises towards the mean as the recurrences add up.
    assert unknown_default_bound(many, 1) / 1 < unknown_default_bound(many, 50) / 50


def known_books(spent: float, recurrences: int, known: int) -> BudgetLedger:
    """Books of ``recurrences`` begun, ``known`` of them with b0 run to its end at a Default
    cost of 100 each."""
    return BudgetLedger(
        spent_cost=spent,
        recurrences=recurrences,
        default_costs=(100.0,) * known,
        known_default_cost=100.0 * known,
        known_recurrences=known,
    )


def test_the_allowance_is_known_defaults_plus_the_unknown_ones_taken_low() -> None:
    ledger = known_books(spent=950.0, recurrences=10, known=8)
    status = budget_status(config(0.1), ledger)
    assert status is not None
    assert status.default_total == pytest.approx(800.0 + unknown_default_bound(ledger, 2))
    assert status.default_total_before == pytest.approx(800.0 + unknown_default_bound(ledger, 1))
    assert status.allowance == pytest.approx(1.1 * status.default_total)
    assert status.left_runs() == pytest.approx((status.allowance - 950.0) / 100.0)
    assert budget_status(config(None), ledger) is None
    assert budget_status(config(0.1), BudgetLedger(recurrences=1)) is None  # no Default yet


def test_the_first_week_explores_only_with_what_the_job_saved() -> None:
    week = known_books(spent=600.0, recurrences=7, known=6)
    first = budget_status(config(0.1), week)
    second = budget_status(config(0.1), replace(week, recurrences=8))
    assert first is not None and second is not None
    assert first.exploring_fraction == 0.0 and second.exploring_fraction == 0.1
    # The allowance (and the figure left) is the same budget's; only what exploring may use
    # differs.
    assert first.allowance == pytest.approx(1.1 * first.default_total)
    assert first.room() == pytest.approx(first.default_total - 600.0)


def test_the_books_after_a_try_know_defaults_cost_when_the_default_size_ran_to_its_end() -> None:
    ledger = known_books(spent=300.0, recurrences=4, known=3)
    status = budget_status(config(0.1), ledger)
    assert status is not None
    b0_run = RunOutcome(32, 250, 0.0, 0.0, 90.0, 3, True, "target", 0.9, default_cost=110.0)
    after = budget_after(config(0.1), status, b0_run, judged=True)
    assert after is not None
    assert after.spent == 390.0 and after.default_total == pytest.approx(410.0)
    assert after.left_runs() == pytest.approx((1.1 * 410.0 - 390.0) / (410.0 / 4))
    # Another size, or an unjudged try, prices no Default: its recurrence stays estimated.
    other = replace(b0_run, batch_size=16)
    for outcome, judged in ((other, True), (b0_run, False)):
        estimated = budget_after(config(0.1), status, outcome, judged=judged)
        assert estimated is not None and estimated.default_total == status.default_total


@pytest.mark.parametrize("value", [-0.1, math.inf, math.nan, "0.1", True])
def test_a_bad_budget_is_refused_naming_the_parameter(value: object) -> None:
    with pytest.raises(ConfigError, match=r"exploration_budget=.* is invalid: expected None"):
        config(value)  # type: ignore[arg-type]


def test_the_budget_does_not_start_a_new_job_version() -> None:
    assert config(0.1).fingerprint() == config(None).fingerprint() == config(0.5).fingerprint()


# --- prices from the job's own evidence ---------------------------------------------------------
def test_a_size_is_priced_from_its_cost_per_sample_and_how_epochs_scale() -> None:
    reference = CostReference(batch_size=64, mean_cost=100.0, sample_cost=1.0)
    smaller = cost_range(reference, 32, sample_cost=1.5)  # 1.5 x dearer per sample
    assert (smaller.lowest, smaller.expected, smaller.highest) == pytest.approx((75, 150, 150))
    larger = cost_range(reference, 128, sample_cost=0.5)
    assert (larger.lowest, larger.expected, larger.highest) == pytest.approx((50, 50, 100))
    # A noisy reference widens the range, never the expectation.
    noisy = cost_range(replace(reference, mean_spread=0.1), 32, sample_cost=1.5)
    assert noisy.lowest < smaller.lowest and noisy.highest > smaller.highest
    assert noisy.expected == smaller.expected
    assert cannot_beat(smaller.lowest, 60.0) and not cannot_beat(smaller.lowest, 70.0)


def movielens() -> tuple[ReplayGPU, JobConfig, CostReference]:
    """v100 movielens-1m (b0 1024), and 1024 as the reference: its replayed per-sample cost
    at the highest limit and its traced mean epochs' cost."""
    trace = load_workload_trace(TRACES, "v100", "movielens-1m")
    gpu = ReplayGPU(trace)
    spec = SimulationSpec("zeus", "v100", "movielens-1m", 1, str(TRACES))
    cfg = job_config(trace, spec)
    top = max(trace.power_limits_w)
    point = trace.epoch(1024, top)
    epoch_cost = zeus_cost(point.time_s * point.avg_power_w, point.time_s, 0.5, float(top))
    sample_cost = epoch_cost / trace.steps_per_epoch(1024) / 1024
    mean = epoch_cost * trace.expected_epochs(1024)
    return gpu, cfg, CostReference(1024, mean, sample_cost)


def try_of(batch_size: int, cap: BudgetCap, early_stop_cost: float) -> RunOutcome:
    gpu, cfg, _ = movielens()
    train = ReplayTraining(gpu, seed=1)
    with open_run(cfg, batch_size, gpu, early_stop_cost=early_stop_cost, budget_cap=cap) as run:
        train(run)
        return run.finish()


def test_an_untried_size_is_priced_from_its_measured_per_sample_figures_a_few_steps_in() -> None:
    gpu, _, reference = movielens()
    gpu.use_batch_size(512)
    epoch = gpu.steps_per_epoch()
    # 512 costs 1.7 x 1024's per sample: even at its most favourable (half the epochs) it is
    # dearer than a best size at half 1024's cost, so it stops as soon as it is priced.
    best = reference.mean_cost / 2
    cap = BudgetCap(verdict_cost=best * 1.5, bound=best * 2, best_cost=best, reference=reference)
    outcome = try_of(512, cap, early_stop_cost=best * 2)
    assert outcome.stop_reason == "cannot_win"
    assert 0 < outcome.steps < epoch / 10  # its profile's first slice, not an epoch
    assert outcome.cost < 0.05 * best
    # Priced as able to win but not expected to fit a low cap: stopped too, censored.
    cheap = BudgetCap(verdict_cost=math.inf, best_cost=math.inf, reference=reference)
    censored = try_of(512, cheap, early_stop_cost=0.5 * reference.mean_cost)
    assert censored.stop_reason == "budget_cap" and censored.steps < epoch / 10
    # A cap that can pay for it: it trains on, to the target.
    roomy = try_of(512, cheap, early_stop_cost=3 * reference.mean_cost)
    assert roomy.stop_reason == "target"


def test_a_probe_nobody_can_price_holds_its_cap_inside_its_first_epoch() -> None:
    gpu, _, reference = movielens()
    gpu.use_batch_size(512)
    epoch = gpu.steps_per_epoch()
    probe = 0.01 * reference.mean_cost  # a small share of one epoch of 512
    cap = BudgetCap(verdict_cost=math.inf, priced_cap=reference.mean_cost)
    outcome = try_of(512, cap, early_stop_cost=probe)
    assert outcome.stop_reason == "budget_cap" and 0 < outcome.steps < epoch
    assert outcome.cost <= 1.01 * probe  # one step past the cap at most
    assert outcome.early_stop_cost == probe


# --- the policy under a budget -----------------------------------------------------------------
def walked_b0(cost: float = 100.0) -> tuple[ExplorationStep, ...]:
    return (ExplorationStep(32, True, cost, seq=1, stop_reason="target", recurrence="d1"),)


def snapshot(ledger: BudgetLedger, budget: float | None = 0.1, **changes: Any) -> JobSnapshot:
    """b0 (32) has run once at cost 100; the walk's next step is 16."""
    return replace(
        JobSnapshot(
            config(budget),
            exploration=walked_b0(),
            observations={32: ArmStats.of([100.0])},
            success_mean_cost={32: 100.0},
            ledger=ledger,
        ),
        **changes,
    )


def books(recurrences: int, saved_per_run: float = 0.0) -> BudgetLedger:
    """b0 ran to its end in every recurrence before this one, at 100 less what it saved."""
    done = recurrences - 1
    return BudgetLedger(
        spent_cost=done * (100.0 - saved_per_run),
        recurrences=recurrences,
        default_costs=(100.0,) * done,
        known_default_cost=100.0 * done,
        known_recurrences=done,
        success_epochs={32: 10.0},
    )


def test_in_the_first_week_without_savings_the_best_known_size_runs() -> None:
    decision = ZeusPolicy().decide(snapshot(books(5)), RNG)
    assert (decision.batch_size, decision.phase) == (32, "exploit")
    assert decision.reason and "first week" in decision.reason
    assert decision.budget is not None and decision.budget.left_before_runs() > 0


def test_from_the_second_week_an_untried_size_runs_capped_at_what_the_books_can_pay() -> None:
    decision = ZeusPolicy().decide(snapshot(books(8)), RNG)
    assert (decision.batch_size, decision.phase) == (16, "pruning")
    status, cap = decision.budget, decision.budget_cap
    assert status is not None and cap is not None and decision.early_stop_cost is not None
    # Stopped there, the recurrence ends with b0, which prices its own Default: the cap is
    # what the earlier recurrences left, less nothing.
    assert decision.early_stop_cost <= status.room(before=True) + 0.1 * 100.0 + 1e-9
    assert decision.early_stop_cost < 2 * 100.0  # below its early-stop bound: censored there


def test_a_job_too_short_to_price_a_probe_explores_only_with_what_it_saved() -> None:
    # Size 16's probe stopped at the cap before its power profile priced it (no cost per
    # sample): the job's epochs are too short for a price. From then on only savings pay.
    unpriced = replace(books(9), censored={16: CensoredTry(cap=5.0, cost=5.0, epochs=1)})
    decision = ZeusPolicy().decide(snapshot(unpriced), RNG)
    assert (decision.batch_size, decision.phase) == (32, "exploit")
    assert decision.reason and "too short to price" in decision.reason
    # Priced by its probe (its cost per sample known), the same books pay for a try.
    priced = ZeusPolicy().decide(snapshot(unpriced, sample_costs={16: 2.0, 32: 3.0}), RNG)
    assert priced.phase == "pruning" and priced.budget is not None
    assert priced.budget.exploring_fraction == 0.1
    # Savings still pay for exploring: the job ran 20 % under Default every day.
    saving = replace(unpriced, spent_cost=8 * 80.0)
    assert ZeusPolicy().decide(snapshot(saving), RNG).phase == "pruning"


def test_a_job_whose_epochs_are_shorter_than_a_price_explores_only_with_what_it_saved() -> None:
    # The best size's epochs take 0.1 s; a price needs the profile's first slice (0.1 s of
    # warm-up and 0.15 s measured at the highest limit): no probe could be priced in one.
    short = replace(books(9), success_epoch_s={32: 0.1})
    decision = ZeusPolicy().decide(snapshot(short), RNG)
    assert (decision.batch_size, decision.phase) == (32, "exploit")
    assert decision.reason and "too short to price" in decision.reason
    long = replace(books(9), success_epoch_s={32: 30.0})
    assert ZeusPolicy().decide(snapshot(long), RNG).phase == "pruning"
    # Its power profile, too, spends only what the job saved: 5 a run over 8 runs.
    status = decision.budget
    assert status is not None and status.savings_only
    assert profiling_credit(config(0.1), status) == ProfilingCredit(0.0, 0.0)
    saved = ZeusPolicy().decide(snapshot(replace(short, spent_cost=8 * 95.0)), RNG).budget
    assert profiling_credit(config(0.1), saved) == ProfilingCredit(pytest.approx(40.0), 0.0)
    assert profiling_credit(config(0.1), budget_status(config(0.1), long)).fraction == 0.1


def test_a_scripted_worst_case_stopped_at_its_cap_stays_within_the_allowance() -> None:
    cfg = config(0.1)
    decision = ZeusPolicy().decide(snapshot(books(8)), RNG)
    status = decision.budget
    assert status is not None and decision.early_stop_cost is not None
    # The worst case: the try costs its whole cap, then b0 runs the recurrence to its end,
    # at as much as Default would (its default cost is its cost).
    capped = RunOutcome(16, 250, 0, 0, decision.early_stop_cost, 2, False, "budget_cap", 0.5)
    after_cap = budget_after(cfg, status, capped, judged=True)
    assert after_cap is not None
    retry_status = replace(status, spent=after_cap.spent, ledger=after_cap.ledger)
    b0_run = RunOutcome(32, 250, 0, 0, 100.0, 3, True, "target", 0.9, default_cost=100.0)
    after = budget_after(cfg, retry_status, b0_run, judged=True)
    assert after is not None and after.left_runs() >= -1e-9


def test_a_try_stopped_at_the_cap_does_not_prune_its_size_the_walk_defers_it() -> None:
    cfg = config(0.1)
    censored = ExplorationStep(16, False, 40.0, seq=2, stop_reason="budget_cap", recurrence="d8")
    state = pruning_state(cfg, walked_b0(), deferred=(censored,))
    assert state.next_batch_size == 64  # the other direction first
    after_up = (
        *walked_b0(),
        ExplorationStep(64, False, 300.0, seq=3, stop_reason="early_stop", recurrence="d9"),
    )
    state = pruning_state(cfg, after_up, deferred=(censored,))
    assert (state.next_batch_size, state.round) == (16, 1)  # back to 16, still in play
    # The same step as a failure ends the walk downwards, 16 pruned.
    failed = (*walked_b0(), replace(censored, stop_reason="early_stop"))
    assert pruning_state(cfg, failed).next_batch_size == 64
    assert 16 not in pruning_state(cfg, (*failed, after_up[-1])).survivors


def test_a_censored_size_is_tried_again_only_once_the_cap_can_pay_what_it_missed() -> None:
    decision = Decision(16, "pruning", early_stop_cost=200.0)

    def need(censored: CensoredTry) -> float:
        ledger = replace(books(8), censored={16: censored}, success_epochs={32: 4.0})
        stopped = ExplorationStep(16, False, censored.cost, seq=2, stop_reason="budget_cap")
        return needed_cap(snapshot(ledger, deferred=(stopped,)), decision, best=32)

    # A probe stopped after its first epoch: an epoch more, and as many epochs as 32 needs.
    assert need(CensoredTry(cap=40.0, cost=13.0, epochs=1)) == pytest.approx(13.0 * 4)
    # Stopped after its price let it go on: only a cap that judges it, where it cannot win
    # (4 spreads above the best mean), is worth paying again.
    snap = snapshot(replace(books(8), success_epochs={32: 4.0}))
    assert need(CensoredTry(cap=40.0, cost=39.0, epochs=3)) == pytest.approx(verdict_cost(snap))
    fresh = snapshot(replace(books(8), success_epochs={32: 4.0}))
    # Two epochs of 32: the first epoch of another size runs whole, at up to twice the cost.
    assert needed_cap(fresh, decision, best=32) == pytest.approx(50.0)


def test_a_best_size_with_a_lucky_run_is_not_exploited_when_its_upper_cost_does_not_fit() -> None:
    lucky = snapshot(
        books(20),
        observations={32: ArmStats.of([100.0] * 19), 16: ArmStats.of([60.0])},
        success_mean_cost={32: 100.0, 16: 60.0},
    )
    status = budget_status(lucky.config, lucky.ledger)
    assert status is not None
    tight = replace(lucky.ledger, spent_cost=status.allowance - 5.0)  # 5 left of it
    decision = priced_exploit(lucky, Decision(16, "sampling"), budget_status(lucky.config, tight))
    assert (decision.batch_size, decision.phase) == (32, "exploit")  # b0 prices itself
    assert decision.early_stop_cost is None
    roomy = priced_exploit(lucky, Decision(16, "sampling"), budget_status(lucky.config, books(20)))
    assert roomy.batch_size == 16


def test_a_retry_delivers_the_model_rather_than_explore() -> None:
    stopped_probe = replace(books(9), recurrence_spent=1.0)
    spent_run = replace(books(9), recurrence_spent=80.0)
    for ledger, explores in ((stopped_probe, True), (spent_run, False)):
        snap = snapshot(ledger, excluded=frozenset({64}))
        assert may_explore_now(snap, best=32) is explores


def test_no_budget_explores_as_the_paper_does() -> None:
    decision = ZeusPolicy().decide(snapshot(books(2), budget=None), RNG)
    assert (decision.batch_size, decision.phase) == (16, "pruning")
    assert decision.budget_cap is None and decision.early_stop_cost == 200.0


def test_before_defaults_first_complete_run_only_the_default_size_runs() -> None:
    empty = JobSnapshot(config(), ledger=BudgetLedger(recurrences=1))
    decision = ZeusPolicy().decide(empty, RNG)
    assert (decision.batch_size, decision.phase) == (32, "pruning")  # b0 is Default's choice


def paired_costs(
    budget: float | None,
    recurrences: int,
    trace: WorkloadTrace | None = None,
    mode: str = "optimize",
) -> tuple[list[float], list[float]]:
    """Zeus and Default on the same days of ``trace``'s job in power-limit ``mode``; by
    default one where every size but b0 misses the target: each exploration is the worst
    case, stopped at its bound and then retried with b0."""
    if trace is None:
        trace = deceptive(load_workload_trace(TRACES, "v100", "imagenet"), math.inf)
    costs = []
    for policy in (ZeusPolicy(), DefaultPolicy()):
        gpu = ReplayGPU(trace)
        spec = SimulationSpec(
            "zeus",
            "v100",
            trace.workload.name,
            1,
            str(TRACES),
            job={"exploration_budget": budget, "power_limit_mode": mode},
        )
        engine = Engine(
            SQLStore.in_memory(), gpu, job_config(trace, spec), policy, seed=1, heartbeat_s=None
        )
        train = ReplayTraining(gpu, seed=1)
        run_costs = []
        for day in range(recurrences):
            train.recurrence = day
            result = engine.run_recurrence(train, RecurrenceKey(f"day-{day}"))
            run_costs.append(result.cost)
            if policy.name == "zeus" and budget is not None and result.budget_left_runs:
                assert result.budget_left_runs >= -1e-9, f"day {day}: over the books"
        costs.append(run_costs)
    return costs[0], costs[1]


def deceptive(trace: WorkloadTrace, factor: float) -> WorkloadTrace:
    """``trace`` where every size but b0 needs ``factor`` times b0's epochs (inf: it never
    reaches the target): priced from their traced steps, the others look as cheap per sample
    as they are, and every one turns out dearer, as far beyond any belief as ``factor``
    takes it."""
    b0 = trace.default_batch_size
    needs = tuple(factor * e for e in trace.target_epochs[b0])
    return dataclasses.replace(
        trace,
        target_epochs={b: runs if b == b0 else needs for b, runs in trace.target_epochs.items()},
    )


def worst_ratio(zeus: list[float], default: list[float]) -> float:
    return max(z / d for z, d in zip(accumulate(zeus), accumulate(default), strict=True))


def test_the_budget_holds_at_every_run_when_every_exploration_is_the_worst_case() -> None:
    assert worst_ratio(*paired_costs(0.1, 40)) <= 1.1
    assert worst_ratio(*paired_costs(None, 40)) > 1.5  # the scripted case breaks an unbounded job


@pytest.mark.parametrize("factor", [1.5, 3.0, math.inf])
def test_a_scripted_worst_case_in_measure_mode_never_breaks_the_bound(factor: float) -> None:
    # Where no limit can move, movielens-1m's larger sizes are a third cheaper per sample and
    # every price says try them; here each needs more epochs than any belief allows.
    trace = deceptive(load_workload_trace(TRACES, "v100", "movielens-1m"), factor)
    zeus, default = paired_costs(0.1, 40, trace, mode="measure")
    assert worst_ratio(zeus, default) <= 1.1 + 1e-9
    week = sum(zeus[:7]) / sum(default[:7])
    assert week <= 1.0 + 1e-9  # the first week spends nothing it did not save


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


def test_a_frontier_size_that_reached_its_target_stays_in_play_and_the_frontier_goes_on() -> None:
    """The walk stopped at 64 (an early stop) and never reached 128 or 256. Once 64 reached
    its target since, 128 is tried; after 128 reached its target too it stays an arm, judged
    by its cost (the cheapest here), and 256 is next; a dearer 128 drops, as the walk would
    have stopped there. Before, 128 dropped out of play after its one try: drift detection
    on A40 imagenet x2 d1.2 found 512 so, and never chose it again."""
    cfg = config(None)
    walked = (
        ExplorationStep(32, True, 100.0, seq=1),
        ExplorationStep(16, True, 140.0, seq=2),
        ExplorationStep(64, False, 250.0, seq=3, stop_reason="early_stop"),
        ExplorationStep(32, True, 100.0, seq=4),
    )
    snap = JobSnapshot(
        dataclasses.replace(cfg, batch_sizes=(16, 32, 64, 128, 256)),
        exploration=walked,
        observations={16: ArmStats.of([140.0]), 32: ArmStats.of([100.0, 100.0])},
        success_mean_cost={16: 140.0, 32: 100.0},
    )
    assert job_phase(snap)[1] == (32,)  # round 2 dropped 16 as dominated
    back = dataclasses.replace(
        snap,
        observations={**snap.observations, 64: ArmStats.of([90.0])},
        success_mean_cost={**snap.success_mean_cost, 64: 90.0},
        evidence={64: SizeEvidence(last_success_seq=6)},
    )
    assert job_phase(back)[1] == (32, 64, 128)  # 64 earned its try back; 128 is next
    ran = dataclasses.replace(
        back,
        observations={**back.observations, 128: ArmStats.of([80.0])},
        success_mean_cost={**back.success_mean_cost, 128: 80.0},
    )
    assert job_phase(ran)[1] == (32, 64, 128, 256)
    # Dearer than 64, 128 drops after its try, as the walk would have stopped there.
    dearer = dataclasses.replace(
        ran,
        observations={**back.observations, 128: ArmStats.of([95.0])},
        success_mean_cost={**back.success_mean_cost, 128: 95.0},
    )
    assert job_phase(dearer)[1] == (32, 64)


# --- one figure for what is left ---------------------------------------------------------------
def test_the_budget_left_is_one_figure_in_the_summary_the_store_and_the_reports() -> None:
    """A replayed cifar100 job through its second week (probes, capped tries, retries): after
    every run, the figure its summary and XComs show is the store's and the reports', the
    next decision starts from it, and it is never negative."""
    trace = load_workload_trace(TRACES, "v100", "cifar100")
    gpu = ReplayGPU(trace)
    spec = SimulationSpec("zeus", "v100", "cifar100", 3, str(TRACES))
    store = SQLStore.in_memory()
    engine = Engine(store, gpu, job_config(trace, spec), ZeusPolicy(), seed=3, heartbeat_s=None)
    train = ReplayTraining(gpu, seed=3)
    previous: float | None = None
    for day in range(14):
        train.recurrence = day
        result = engine.run_recurrence(train, RecurrenceKey(f"day-{day}"))
        left = result.budget_left_runs
        with store.reader() as reader:
            shown = runs(reader, result.job.id)[-1]
        assert shown.budget_left_runs == left
        if left is not None:
            assert f"{left:.1f} Default runs' worth left" in summary_line(result)
            assert left >= -1e-9
        first = result.tries[0].budget
        if previous is not None and first is not None:
            assert first.left_before_runs() == pytest.approx(previous)
        previous = left
    assert any(t.phase == "pruning" for t in result.tries) or previous is not None
    # The store's books know how long an epoch takes (cifar100's replayed epochs: 8-33 s,
    # smaller batches slower), so this job is long enough to price its probes.
    status = result.tries[0].budget
    assert status is not None and status.ledger.success_epoch_s
    epoch_s = status.ledger.success_epoch_s
    assert all(seconds > 5.0 for seconds in epoch_s.values())
    assert epoch_s[min(epoch_s)] > epoch_s[max(epoch_s)]


def test_a_retry_of_the_default_size_always_runs() -> None:
    """After a stopped try, the recurrence still gets the model it would have had without
    Zeus, whatever its tries spent: the default size runs (a probe that overspent shows in
    the books, never as a missing model). Once it ran and missed, the recurrence ends."""
    probed = replace(books(5), spent_cost=1.1 * 400.0 + 50.0, recurrence_spent=50.0)
    snap = snapshot(probed, excluded=frozenset({16}))
    status = budget_status(snap.config, probed)
    assert status is not None and status.left_before_runs() < 0
    assert priced_exploit(snap, Decision(32, "exploit"), status).batch_size == 32
    missed = replace(snap, excluded=frozenset({16, 32}))
    with pytest.raises(NoFeasibleBatchSizeError, match="as it would without Zeus"):
        priced_exploit(missed, Decision(16, "exploit"), status)
