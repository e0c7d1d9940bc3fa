"""The real profiler, TrainingRun and EnergyMonitor over NVMLGPUs on a fake NVML.

The fake runs on a manual clock: each training step advances it by the step time the test's
table gives for the current power limit, and the fake's energy counters follow, so every
measurement, optimum and set call below is known in advance.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.decide.budget import ProfilingCredit
from zeus_airflow.core.devices.energy import probe_update_period_s
from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.domain import PowerProfile, RecurrenceKey, RunOutcome, SliceInProgress
from zeus_airflow.core.reports.arms import profile_points
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.profiler import SLICE_COUNTER_UPDATES, PowerLimitProfiler
from zeus_airflow.core.train.run import TrainingRun, open_run
from zeus_airflow.testing import A100_PCIE, FakeGPUSpec, FakeNVML, ManualClock

BATCH_SIZE = 32
WARMUP_STEPS, PROFILE_STEPS = 2, 5
SLICE_STEPS = WARMUP_STEPS + PROFILE_STEPS
EVAL_S = 5.0
"""Evaluation time at each epoch's end: a slice that spanned it would be badly off."""

STEP_TIME_S = {250: 0.100, 225: 0.102, 200: 0.106, 175: 0.108, 150: 0.130}
"""Seconds per step at each limit (W) of a 150..250 W GPU. The fake draws 90 % of the limit,
so with eta 0.5 and MAXPOWER 250 W the cost per step, (0.45 p + 125) t, is lowest at 175 W."""
OPTIMUM_W = 175
ORIGINAL_W = 200


@pytest.fixture(autouse=True)
def _no_visibility_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@dataclass
class Rig:
    """A fake NVML on a manual clock and the NVMLGPUs over it."""

    fake: FakeNVML
    clock: ManualClock
    gpus: NVMLGPUs

    def sets_w(self, index: int = 0) -> list[int]:
        """The limits (W) NVML accepted for one GPU, in order."""
        return [mw // 1000 for i, mw in self.fake.allowed_sets() if i == index]

    def train(
        self,
        steps_per_epoch: int,
        target_epoch: int = 3,
        step_time_s: Mapping[int, float] = STEP_TIME_S,
        on_epoch: Callable[[TrainingRun], None] | None = None,
    ) -> Callable[[TrainingRun], None]:
        """A train function: each step takes the table's time at the GPUs' current limit;
        the metric reaches the target (1.0) at ``target_epoch``."""

        def train(run: TrainingRun) -> None:
            for epoch in run.epochs():
                if on_epoch is not None:
                    on_epoch(run)
                for _ in run.steps(range(steps_per_epoch)):
                    self.clock.advance(step_time_s[self.fake.limits_mw()[0] // 1000])
                self.clock.advance(EVAL_S)
                run.report_metric(epoch / target_epoch)

        return train

    def engine(
        self, store: SQLStore | None = None, config: JobConfig | None = None, **options: Any
    ) -> Engine:
        """The real engine on these GPUs: seed 1, no heartbeat thread, an in-memory store
        unless one is given."""
        return Engine(
            store or SQLStore.in_memory(),
            self.gpus,
            config or job_config(),
            seed=1,
            heartbeat_s=None,
            **options,
        )


def make_rig(
    count: int = 1,
    *,
    spec: FakeGPUSpec | None = None,
    gpus: list[FakeGPUSpec] | None = None,
    can_set_limits: bool = True,
) -> Rig:
    clock = ManualClock()
    spec = spec or replace(A100_PCIE, default_limit_mw=ORIGINAL_W * 1000)
    fake = FakeNVML(count, spec, gpus=gpus, clock=clock, can_set_limits=can_set_limits)
    return Rig(fake, clock, NVMLGPUs(nvml=fake, clock=clock))


def job_config(
    mode: str = "optimize",
    selector: str = "zeus",
    *,
    eta: float = 0.5,
    max_slowdown: float = 1.1,
    max_epochs: int = 10,
    exploration_budget: float | None = None,
) -> JobConfig:
    # Windows by steps only (no seconds), so that each slice's steps are known in advance.
    # No budget unless a test is about it: the slices' order and length are the subject.
    profiler = ProfilerConfig(
        warmup_steps=WARMUP_STEPS,
        profile_steps=PROFILE_STEPS,
        warmup_s=0.0,
        profile_s=0.0,
        mode=mode,
        selector=selector,  # type: ignore[arg-type]
        max_slowdown=max_slowdown,
    )
    return JobConfig(
        "job",
        (BATCH_SIZE,),
        BATCH_SIZE,
        target_metric=1.0,
        max_epochs=max_epochs,
        eta=eta,
        profiler=profiler,
        exploration_budget=exploration_budget,
    )


@dataclass
class Trial:
    outcome: RunOutcome
    profiler: PowerLimitProfiler


def run_trial(
    rig: Rig,
    train: Callable[[TrainingRun], None],
    config: JobConfig | None = None,
    profile: PowerProfile | None = None,
) -> Trial:
    """One try through the core's public way to open one."""
    config = config or job_config()
    with open_run(config, BATCH_SIZE, rig.gpus, profile=profile) as run:
        train(run)
        outcome = run.finish()
    return Trial(outcome, run.profiler)


def new_profile(rig: Rig) -> PowerProfile:
    return PowerProfile(
        BATCH_SIZE, rig.gpus.model, rig.gpus.count, rig.gpus.candidate_power_limits_w()
    )


def assert_exact_profile(profile: PowerProfile, count: int = 1) -> None:
    """Each measured limit shows the fake's true power and the table's true speed."""
    for limit_w, measured in profile.measurements.items():
        assert measured.avg_power_w == pytest.approx(0.9 * limit_w * count, rel=1e-4)
        assert measured.steps_per_s == pytest.approx(1 / STEP_TIME_S[limit_w], rel=1e-9)


def test_sets_each_candidate_in_search_order_then_the_optimum_then_the_original() -> None:
    rig = make_rig()
    trial = run_trial(rig, rig.train(steps_per_epoch=100))
    assert rig.sets_w() == [250, 150, 225, 200, 175, OPTIMUM_W, ORIGINAL_W]
    assert trial.profiler.optimal_power_limit_w == OPTIMUM_W
    assert trial.outcome.power_limit_w == OPTIMUM_W and trial.outcome.reached_target
    assert trial.profiler.profile.complete
    assert_exact_profile(trial.profiler.profile)


def test_a_complete_profile_is_reused_without_profiling_again() -> None:
    rig = make_rig()
    profile = run_trial(rig, rig.train(steps_per_epoch=100)).profiler.profile
    rig.fake.set_calls.clear()
    trial = run_trial(rig, rig.train(steps_per_epoch=100), profile=profile)
    assert rig.sets_w() == [OPTIMUM_W, ORIGINAL_W]
    assert trial.outcome.power_limit_w == OPTIMUM_W


@pytest.mark.parametrize("steps_past_warmup", [0, 2])
def test_an_epoch_ending_mid_profile_keeps_what_was_measured_without_the_evaluation(
    steps_past_warmup: int,
) -> None:
    rig = make_rig()
    seen_at_epoch_start: list[set[int]] = []
    # 250 and 150 W finish in epoch 1; the 225 W slice is cut just after its warm-up or two
    # measured steps later, and the epoch's evaluation (EVAL_S) follows.
    steps = 2 * SLICE_STEPS + WARMUP_STEPS + steps_past_warmup
    train = rig.train(
        steps_per_epoch=steps,
        on_epoch=lambda run: seen_at_epoch_start.append(set(run.profiler.profile.measurements)),
    )
    trial = run_trial(rig, train)
    assert seen_at_epoch_start[:2] == [set(), {250, 150}]
    assert rig.sets_w() == [250, 150, 225, 200, 175, OPTIMUM_W, ORIGINAL_W]
    assert_exact_profile(trial.profiler.profile)


def test_a_run_ending_mid_profile_leaves_a_partial_profile_the_next_run_continues() -> None:
    rig = make_rig()
    profile = new_profile(rig)
    # One epoch of 10 steps: 250 W measured, 150 W (the minimum, measured second) cut three
    # steps in.
    first = run_trial(
        rig, rig.train(steps_per_epoch=SLICE_STEPS + 3, target_epoch=1), profile=profile
    )
    assert set(profile.measurements) == {250} and not profile.complete
    assert first.outcome.reached_target
    assert rig.sets_w() == [250, 150, ORIGINAL_W]
    rig.fake.set_calls.clear()
    run_trial(rig, rig.train(steps_per_epoch=100), profile=profile)
    assert rig.sets_w() == [150, 225, 200, 175, OPTIMUM_W, ORIGINAL_W]
    assert profile.complete
    assert_exact_profile(profile)


def test_runs_shorter_than_a_slice_finish_the_profile_over_several_runs() -> None:
    """A run of 5 steps never holds a 2 + 5-step slice: each keeps the measured part of the
    slice it ends in, and the next run continues it after its own warm-up."""
    rig = make_rig()
    profile = new_profile(rig)
    short = rig.train(steps_per_epoch=WARMUP_STEPS + 3, target_epoch=1)
    run_trial(rig, short, profile=profile)
    # 250 W: 2 warm-up steps, then 3 measured at 0.1 s, drawing 90 % of 250 W.
    assert profile.partial == SliceInProgress(
        250, 3, pytest.approx(0.3), pytest.approx(0.9 * 250 * 0.3)
    )
    assert not profile.measurements
    runs = 1
    while not profile.complete:
        run_trial(rig, short, profile=profile)
        runs += 1
        assert runs <= 12, "the profile never completes"
    # Five slices of 5 measured steps, each over two runs (3 + 2 after 2 warm-up steps each).
    assert runs == 10 and profile.partial is None
    assert_exact_profile(profile)


def test_an_epoch_end_warms_up_by_steps_the_first_warmup_at_a_limit_by_seconds() -> None:
    """The seconds of warm-up are for a new limit to settle: after an epoch's end at the same
    limit only the steps' floor applies, so short epochs still get measured."""
    rig = make_rig()
    config = job_config()
    config = replace(config, profiler=replace(config.profiler, warmup_s=0.95))
    limits: list[list[int]] = []

    def train(run: TrainingRun) -> None:
        for epoch in run.epochs():
            limits.append([])
            for _ in run.steps(range(12)):
                limits[-1].append(rig.fake.limits_mw()[0] // 1000)
                rig.clock.advance(STEP_TIME_S[limits[-1][-1]])
            rig.clock.advance(EVAL_S)
            run.report_metric(epoch / 2)

    run_trial(rig, train, config)
    # Epoch 1: 10 warm-up steps at 250 W (1 s), 2 measured. Epoch 2: 2 warm-up, 3 measured,
    # then 150 W (the minimum, measured second).
    assert limits[0] == [250] * 12
    assert limits[1][: WARMUP_STEPS + 3] == [250] * 5 and limits[1][5] == 150


def test_the_store_keeps_a_slice_in_progress_apart_from_the_measurements() -> None:
    rig = make_rig()
    store = SQLStore.in_memory()
    engine = rig.engine(store)
    short = rig.train(WARMUP_STEPS + 3, target_epoch=1)
    engine.run_recurrence(short, RecurrenceKey("r1"))
    job = store.register_job(job_config())
    loaded = store.load_profile(job, BATCH_SIZE, engine.device_info)
    assert not loaded.measurements
    assert loaded.partial == SliceInProgress(
        250, 3, pytest.approx(0.3), pytest.approx(0.9 * 250 * 0.3)
    )
    with store.reader() as reader:
        assert profile_points(reader, job.id) == ()  # no report shows it
    engine.run_recurrence(short, RecurrenceKey("r2"))
    loaded = store.load_profile(job, BATCH_SIZE, engine.device_info)
    assert set(loaded.measurements) == {250} and loaded.partial is None
    assert_exact_profile(loaded)
    with store.reader() as reader:  # the slice in progress is gone, measured whole
        assert [p.power_limit_w for p in profile_points(reader, job.id)] == [250]


def test_observer_mode_trains_at_the_maximum_and_reports_the_savings() -> None:
    rig = make_rig()
    steps_per_epoch = 100
    trial = run_trial(rig, rig.train(steps_per_epoch), job_config("observe"))
    assert rig.sets_w() == [250, 150, 225, 200, 175, 250, ORIGINAL_W]
    # The outcome says the limit it trained at, and apart the optimum it found.
    assert trial.outcome.power_limit_w == 250
    assert trial.outcome.optimal_power_limit_w == OPTIMUM_W
    report = trial.outcome.observer
    assert report is not None
    # After profiling: the remaining steps and the 3 evaluations, at 250 W (225 W drawn).
    after_s = (3 * steps_per_epoch - 5 * SLICE_STEPS) * STEP_TIME_S[250] + 3 * EVAL_S
    energy_ratio = (175 * STEP_TIME_S[175]) / (250 * STEP_TIME_S[250])
    assert report.would_save_energy_j == pytest.approx(225 * after_s * (1 - energy_ratio), rel=1e-4)
    assert report.would_save_energy_j > 0
    assert report.would_save_time_s < 0  # 175 W is slower


def test_measure_mode_never_changes_a_setting() -> None:
    rig = make_rig()
    energy_before_mj = rig.fake.true_energy_mj(0)
    trial = run_trial(rig, rig.train(steps_per_epoch=100), job_config("measure"))
    assert rig.fake.set_calls == []
    assert trial.outcome.power_limit_w == ORIGINAL_W
    true_j = (rig.fake.true_energy_mj(0) - energy_before_mj) / 1000
    assert trial.outcome.energy_j == pytest.approx(true_j, abs=0.01)
    assert trial.outcome.time_s == pytest.approx(3 * (100 * STEP_TIME_S[200] + EVAL_S))


def test_no_permission_warns_and_trains_on_in_measure_mode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = make_rig(can_set_limits=False)
    with caplog.at_level(logging.WARNING):
        trial = run_trial(rig, rig.train(steps_per_epoch=100))
    assert "cannot set GPU power limits" in caplog.text and "CAP_SYS_ADMIN" in caplog.text
    assert trial.outcome.reached_target and trial.outcome.epochs == 3
    assert trial.profiler.mode == "measure"
    assert rig.fake.allowed_sets() == []
    assert len(rig.fake.set_calls) == 1  # one refused try, then no more
    assert trial.outcome.power_limit_w == ORIGINAL_W


def test_the_engine_restores_the_limit_and_records_an_error_when_training_raises() -> None:
    rig = make_rig()
    store = SQLStore.in_memory()
    engine = rig.engine(store)

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for step in run.steps(range(100)):
                rig.clock.advance(STEP_TIME_S[rig.fake.limits_mw()[0] // 1000])
                if step == SLICE_STEPS + 3:
                    raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        engine.run_recurrence(train, RecurrenceKey(run_id="r1"))
    assert rig.sets_w() == [250, 150, ORIGINAL_W]
    assert rig.fake.limits_mw() == [ORIGINAL_W * 1000]
    (trial,) = list_trials(store)
    assert trial.status == "error" and trial.error and "CUDA out of memory" in trial.error


def test_the_engine_keeps_a_partial_profile_for_the_next_recurrence() -> None:
    rig = make_rig()
    engine = rig.engine()
    engine.run_recurrence(rig.train(SLICE_STEPS + 3, target_epoch=1), RecurrenceKey("r1"))
    rig.fake.set_calls.clear()
    result = engine.run_recurrence(rig.train(100), RecurrenceKey("r2"))
    # The try profiles the four limits r1 left, then trains at the optimum. Its epoch of 100
    # steps costs more than twice r1's 53-step one, but the only size sets the bound itself,
    # so it runs to its end.
    assert rig.sets_w() == [150, 225, 200, 175, OPTIMUM_W, ORIGINAL_W]
    assert [t.outcome.stop_reason for t in result.tries] == ["target"]
    assert result.power_limit_w == OPTIMUM_W


SELECTOR_STEP_TIME_S = {
    300: 0.100,
    275: 0.100,
    250: 0.101,
    225: 0.104,
    200: 0.108,
    175: 0.115,
    150: 0.125,
    125: 0.145,
    100: 0.180,
}
"""A 100..300 W GPU drawing 90 % of its limit. Per step, with MAXPOWER 300 W:
energy 0.9 p t is lowest at 100 W; time is lowest at 300 and 275 W (a tie: the higher wins);
the Zeus cost (0.45 p + 150) t at eta 0.5 is lowest at 200 W; within a 5 % slowdown
(t <= 0.105 s) the least energy is at 225 W."""


@pytest.mark.parametrize(
    ("selector", "eta", "max_slowdown", "expected_w"),
    [
        ("zeus", 0.5, 1.1, 200),
        ("zeus", 1.0, 1.1, 100),  # eta 1: energy only
        ("zeus", 0.0, 1.1, 300),  # eta 0: time only
        ("min-energy", 0.5, 1.1, 100),
        ("min-time", 0.5, 1.1, 300),
        ("min-energy-within-slowdown", 0.5, 1.05, 225),
    ],
)
def test_selectors_pick_the_expected_limit(
    selector: str, eta: float, max_slowdown: float, expected_w: int
) -> None:
    rig = make_rig(spec=FakeGPUSpec(min_limit_mw=100_000, max_limit_mw=300_000))
    config = job_config(selector=selector, eta=eta, max_slowdown=max_slowdown)
    trial = run_trial(rig, rig.train(100, step_time_s=SELECTOR_STEP_TIME_S), config)
    assert trial.profiler.optimal_power_limit_w == expected_w
    profiled = rig.sets_w()[: len(trial.profiler.profile.measurements)]
    assert profiled[0] == 300 and len(profiled) < len(SELECTOR_STEP_TIME_S)  # a search
    assert rig.sets_w()[len(profiled)] == expected_w  # right after profiling
    assert rig.fake.limits_mw() == [300_000]


def test_four_gpus_are_set_together_and_each_restored_to_its_own_limit() -> None:
    spec = FakeGPUSpec(
        min_limit_mw=150_000, max_limit_mw=250_000, default_limit_mw=ORIGINAL_W * 1000
    )
    rig = make_rig(
        gpus=[
            spec,
            spec,
            spec,
            FakeGPUSpec(min_limit_mw=150_000, max_limit_mw=250_000, default_limit_mw=225_000),
        ]
    )
    trial = run_trial(rig, rig.train(steps_per_epoch=100))
    profiled = [250, 150, 225, 200, 175, OPTIMUM_W]
    for index in range(3):
        assert rig.sets_w(index) == [*profiled, ORIGINAL_W]
    assert rig.sets_w(3) == [*profiled, 225]
    assert rig.fake.limits_mw() == [200_000, 200_000, 200_000, 225_000]
    assert_exact_profile(trial.profiler.profile, count=4)
    assert trial.outcome.cost == pytest.approx(
        0.5 * trial.outcome.energy_j + 0.5 * 4 * 250 * trial.outcome.time_s
    )


def test_an_unknown_selector_is_named_with_every_valid_one() -> None:
    from zeus_airflow.core.common.config import SELECTORS
    from zeus_airflow.core.common.cost import LimitMeasurement, choose_power_limit

    with pytest.raises(ValueError, match="selector='fastest' is invalid") as raised:
        choose_power_limit({250: LimitMeasurement(250, 200.0, 10.0)}, "fastest", 0.5, 250.0)
    assert str(raised.value).endswith(", ".join(SELECTORS))


# --- windows sized by time, with a floor of steps --------------------------------------------
def steps_per_limit(rig: Rig, config: JobConfig, steps: int = 100) -> list[tuple[int, int]]:
    """(limit W, consecutive steps trained at it), in order, over one epoch of ``steps``."""
    seen: list[tuple[int, int]] = []

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(steps)):
                limit_w = rig.fake.limits_mw()[0] // 1000
                rig.clock.advance(STEP_TIME_S[limit_w])
                if seen and seen[-1][0] == limit_w:
                    seen[-1] = (limit_w, seen[-1][1] + 1)
                else:
                    seen.append((limit_w, 1))
            run.report_metric(1.0)

    run_trial(rig, train, config)
    return seen


@pytest.mark.parametrize(
    ("warmup_s", "profile_s", "slice_steps", "slice_steps_150"),
    [
        (0.1, 0.3, SLICE_STEPS, SLICE_STEPS),  # 0.1 s steps: the step floors end it
        # The seconds end it: at 250 W (0.1 s steps) 10 steps of warm-up and 30 measured, at
        # 150 W (0.13 s, the minimum, measured second) 8 and 23.
        (0.95, 2.95, 10 + 30, 8 + 23),
    ],
)
def test_a_slice_ends_once_both_its_steps_and_its_seconds_have_passed(
    warmup_s: float, profile_s: float, slice_steps: int, slice_steps_150: int
) -> None:
    config = job_config()
    config = replace(
        config, profiler=replace(config.profiler, warmup_s=warmup_s, profile_s=profile_s)
    )
    seen = steps_per_limit(make_rig(), config, steps=400)
    assert seen[0] == (250, slice_steps)
    assert seen[1] == (150, slice_steps_150)
    assert_exact_profile(run_trial(make_rig(), make_rig().train(100), config).profiler.profile)


def test_bulk_stepping_reaches_the_time_in_estimated_chunks() -> None:
    """run_steps (trace replay) asks the profiler how many steps may run: once the floor is
    met, an estimate from the time per step so far, re-checked when told."""
    rig = make_rig()
    config = job_config()
    config = replace(config, profiler=replace(config.profiler, warmup_s=0.95, profile_s=2.95))
    chunks: list[int] = []

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():

            def work(steps: int) -> None:
                chunks.append(steps)
                rig.clock.advance(steps * STEP_TIME_S[rig.fake.limits_mw()[0] // 1000])

            run.run_steps(400, work)
            run.report_metric(1.0)

    trial = run_trial(rig, train, config)
    assert chunks[:4] == [WARMUP_STEPS, 8, PROFILE_STEPS, 25]  # 250 W: 10 + 30 steps
    assert trial.profiler.optimal_power_limit_w == OPTIMUM_W


# --- the search over limits --------------------------------------------------------------------
SEARCHED_W = [250, 150, 225, 200, 175]
"""The order the search measures STEP_TIME_S's limits in: the maximum, the minimum, then the
golden-section probes (its optimum, 175 W, lies next to the minimum, so here it measures all
five)."""


@pytest.mark.parametrize("interrupted_after", range(1, len(SEARCHED_W)))
def test_an_interrupted_search_resumes_where_it_stood(interrupted_after: int) -> None:
    rig = make_rig()
    profile = new_profile(rig)
    # Runs of one short epoch: each measures `interrupted_after` slices, then one more.
    first = rig.train(steps_per_epoch=interrupted_after * SLICE_STEPS + 3, target_epoch=1)
    run_trial(rig, first, profile=profile)
    assert set(profile.measurements) == set(SEARCHED_W[:interrupted_after])
    rig.fake.set_calls.clear()
    trial = run_trial(rig, rig.train(steps_per_epoch=100), profile=profile)
    assert rig.sets_w() == [*SEARCHED_W[interrupted_after:], OPTIMUM_W, ORIGINAL_W]
    assert trial.outcome.optimal_power_limit_w == OPTIMUM_W
    assert_exact_profile(profile)


def test_profiles_stored_before_the_search_still_work() -> None:
    """Old profiles were measured highest first: a full one is complete, a partial one goes
    on from the limits it holds, measuring none of them again."""
    rig = make_rig()
    full = run_trial(rig, rig.train(100)).profiler.profile
    old_full = PowerProfile(
        BATCH_SIZE, rig.gpus.model, 1, full.candidates_w, dict(full.measurements)
    )
    rig.fake.set_calls.clear()
    assert run_trial(rig, rig.train(100), profile=old_full).outcome.power_limit_w == OPTIMUM_W
    assert rig.sets_w() == [OPTIMUM_W, ORIGINAL_W]
    old_partial = PowerProfile(
        BATCH_SIZE,
        rig.gpus.model,
        1,
        full.candidates_w,
        {w: full.measurements[w] for w in (250, 225, 200)},
    )
    rig.fake.set_calls.clear()
    trial = run_trial(rig, rig.train(100), profile=old_partial)
    assert rig.sets_w()[:-2] == [150, 175]  # the minimum first, then the search's probe
    assert trial.outcome.optimal_power_limit_w == OPTIMUM_W


def test_an_unfinished_profile_reports_no_optimum() -> None:
    """The limit a try ended at while profiling is never reported as the optimum."""
    rig = make_rig()
    trial = run_trial(rig, rig.train(steps_per_epoch=SLICE_STEPS + 3, target_epoch=1))
    assert trial.outcome.profile_unfinished
    assert trial.outcome.power_limit_w == 150  # the limit it ended at (the minimum, second)
    assert trial.outcome.optimal_power_limit_w is None


def _unimodal(values: list[float]) -> bool:
    turns = [b - a for a, b in itertools.pairwise(values)]
    falling = True
    for step in turns:
        if step > 0:
            falling = False
        elif not falling and step < 0:
            return False
    return True


def test_the_search_finds_the_swept_optimum_on_every_unimodal_traced_curve() -> None:
    """Every traced (GPU, workload, batch size), its exact per-limit figures: the search
    measures the maximum first and fewer limits than a sweep, and finds the sweep's optimum
    wherever the cost curve is unimodal (a few traced curves are not; there it comes within
    a few %)."""
    from zeus_airflow.core.common.cost import LimitMeasurement, choose_power_limit
    from zeus_airflow.core.common.limit_search import LimitObjective, next_limit_w
    from zeus_airflow.core.common.traces import WORKLOADS, load_workload_trace
    from zeus_airflow.core.devices.spec import resolve_traces_dir

    unimodal_curves = 0
    for gpu in ("v100", "a40"):
        for workload in WORKLOADS:
            trace = load_workload_trace(resolve_traces_dir(None), gpu, workload)
            limits = trace.power_limits_w
            objective = LimitObjective("zeus", 0.5, float(max(limits)))
            for b in trace.batch_sizes:
                exact = {
                    w: LimitMeasurement(
                        w,
                        trace.epoch(b, w).avg_power_w,
                        trace.steps_per_epoch(b) / trace.epoch(b, w).time_s,
                    )
                    for w in limits
                }
                measured: dict[int, LimitMeasurement] = {}
                while (w := next_limit_w(limits, measured, objective)) is not None:
                    measured[w] = exact[w]
                assert next(iter(measured)) == max(limits)
                assert len(measured) < len(limits) or len(limits) <= 5
                found = choose_power_limit(measured, "zeus", 0.5, max(limits))
                best = choose_power_limit(exact, "zeus", 0.5, max(limits))
                cost = {w: m.cost_per_step(0.5, max(limits)) for w, m in exact.items()}
                if _unimodal([cost[w] for w in sorted(limits)]):
                    unimodal_curves += 1
                    assert found == best, (gpu, workload, b)
                else:
                    assert cost[found] <= 1.05 * cost[best], (gpu, workload, b)
    assert unimodal_curves > 20


# --- slices within the exploration budget ----------------------------------------------------
STEEP_STEP_TIME_S = {250: 0.100, 225: 0.105, 200: 0.106, 175: 0.115, 150: 0.150}
"""A GPU that slows down as much as the profiler's worst case allows (at 150 W, the 225 W it
draws at the top stretched over 150 W): a step at 150 W costs (0.45 x 150 + 125) x 0.15 = 28.9
against 23.75 at 250 W, so a job of 14-step runs that profiled freely would spend 11 % over
Default in its first run. The cheapest step is at 200 W."""


def _step_cost(limit_w: int) -> float:
    """The table's true cost per step (eta 0.5, MAXPOWER 250 W, the fake at 90 % of the limit)."""
    time_s = STEEP_STEP_TIME_S[limit_w]
    return 0.5 * 0.9 * limit_w * time_s + 0.5 * 250 * time_s


def _steep_train(rig: Rig, steps: int, limits_seen: list[int]) -> Callable[[TrainingRun], None]:
    """One epoch of ``steps`` at the table's speed, no evaluation: what Default would have
    spent is exactly the steps at 250 W."""

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(steps)):
                limit_w = rig.fake.limits_mw()[0] // 1000
                limits_seen.append(limit_w)
                rig.clock.advance(STEEP_STEP_TIME_S[limit_w])
            run.report_metric(1.0)

    return train


def test_a_slice_starts_only_once_the_run_has_earned_its_worst_case_extra_cost() -> None:
    rig = make_rig()
    limits: list[int] = []
    with open_run(
        job_config(),
        BATCH_SIZE,
        rig.gpus,
        profiling_credit=ProfilingCredit(carried=0.0, fraction=0.1),
    ) as run:
        _steep_train(rig, 200, limits)(run)
        run.finish()
    # At every step, what profiling added over 250 W stays within 10 % of the steps' cost at
    # 250 W: wherever the run ends, it is within its budget.
    extra = list(itertools.accumulate(_step_cost(w) - _step_cost(250) for w in limits))
    assert all(e <= 0.1 * (k + 1) * _step_cost(250) + 1e-9 for k, e in enumerate(extra))
    # The search's second probe, 150 W, costs more than the credit holds after 250 W's slice:
    # the slices step down the curve first (225 W, 200 W: cheap to measure, and 200 W saves),
    # and 150 W comes once the credit affords its worst case; then the search goes on.
    slices = [(w, len(list(group))) for w, group in itertools.groupby(limits)]
    assert slices[:5] == [(w, SLICE_STEPS) for w in (250, 225, 200, 150, 175)]
    assert run.profiler.optimal_power_limit_w == 200


def test_short_runs_stay_within_the_budget_and_still_finish_the_profile() -> None:
    """A job of 14-step runs: with the budget, every run's cumulative cost stays within 1.1 x
    Default's; without it, the first run's slices break that."""

    def cumulative_ratios(exploration_budget: float | None) -> tuple[list[float], RecurrenceResult]:
        rig = make_rig()
        engine = rig.engine(config=job_config(exploration_budget=exploration_budget))
        spent = default = 0.0
        ratios = []
        for day in range(12):
            result = engine.run_recurrence(_steep_train(rig, 14, []), RecurrenceKey(f"r{day}"))
            assert result.figures.default_cost is not None
            spent, default = spent + result.cost, default + result.figures.default_cost
            ratios.append(spent / default)
        return ratios, result

    unbounded, _ = cumulative_ratios(None)
    assert unbounded[0] > 1.1
    bounded, last = cumulative_ratios(0.1)
    assert max(bounded) <= 1.1
    assert last.final.outcome.optimal_power_limit_w == 200  # the table's cheapest step
    assert bounded[-1] < 1.0  # and its saving has paid the slices back


class ReadingClock(ManualClock):
    """A manual clock that also moves 1 ms at each reading, as a real NVML call takes time,
    so that the update period of a counter that advances in steps can be probed."""

    def __call__(self) -> float:
        self.advance(0.001)
        return super().__call__()


def test_probing_a_counter_finds_its_update_period() -> None:
    clock = ReadingClock()
    every_tenth_s = lambda: int(clock() / 0.1) * 1000  # noqa: E731 - a counter's reading
    assert probe_update_period_s(every_tenth_s, clock) == pytest.approx(0.1, abs=0.003)
    continuous = lambda: int(clock() * 1e6)  # noqa: E731
    assert probe_update_period_s(continuous, clock) == 0.0
    assert probe_update_period_s(lambda: 7, clock, max_s=0.5) == 0.5
    standing = ManualClock()
    assert probe_update_period_s(every_tenth_s, standing) == 0.0


def test_a_counter_advancing_every_tenth_of_a_second_is_measured_over_twenty_updates() -> None:
    # An H200's energy counter advances every 0.1 s (bench/RESULTS.md): 5-step slices of
    # 0.1 s steps would each read whole updates, off by up to 20 %.
    clock = ReadingClock()
    spec = replace(A100_PCIE, default_limit_mw=ORIGINAL_W * 1000, energy_update_s=0.1)
    fake = FakeNVML(1, spec, clock=clock)
    rig = Rig(fake, clock, NVMLGPUs(nvml=fake, clock=clock))
    limits_w: list[int] = []

    def train(run: TrainingRun) -> None:
        for epoch in run.epochs():
            for _ in run.steps(range(200)):
                limits_w.append(fake.limits_mw()[0] // 1000)
                clock.advance(STEP_TIME_S[limits_w[-1]])
            run.report_metric(epoch / 2)

    trial = run_trial(rig, train)
    assert rig.gpus.energy_update_period_s() == pytest.approx(0.1, abs=0.01)
    segments = [(limit_w, len(list(steps))) for limit_w, steps in itertools.groupby(limits_w)]
    assert [limit_w for limit_w, _ in segments] == [250, 150, 225, 200, 175]
    for limit_w, steps in segments[:-1]:  # the last goes on at the optimum
        measured_s = (steps - WARMUP_STEPS) * STEP_TIME_S[limit_w]
        assert measured_s >= SLICE_COUNTER_UPDATES * 0.1 - STEP_TIME_S[limit_w]
    assert trial.profiler.optimal_power_limit_w == OPTIMUM_W


def test_default_cost_is_what_the_same_run_costs_at_the_maximum_limit() -> None:
    # Default pays the evaluation (EVAL_S at each epoch's end) too: pricing only the steps
    # would put it a third too low and read a run that saved as over budget.
    rig = make_rig()
    profiled = run_trial(rig, rig.train(steps_per_epoch=100))
    at_max = make_rig(spec=replace(A100_PCIE, default_limit_mw=250_000), can_set_limits=False)
    default = run_trial(at_max, at_max.train(steps_per_epoch=100)).outcome
    assert default.power_limit_w == 250 and profiled.outcome.power_limit_w == OPTIMUM_W
    assert profiled.outcome.default_cost == pytest.approx(default.cost, rel=0.06)
    assert profiled.outcome.cost < default.cost


def test_steps_read_the_energy_counter_once_per_update_not_once_per_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One reading of an H200's counter takes 2.4 ms (bench/RESULTS.md): read at every 10 ms
    # step it would slow profiled steps by a quarter, for a value that changes every 0.1 s.
    clock = ReadingClock()
    spec = replace(A100_PCIE, default_limit_mw=ORIGINAL_W * 1000, energy_update_s=0.1)
    fake = FakeNVML(1, spec, clock=clock)
    rig = Rig(fake, clock, NVMLGPUs(nvml=fake, clock=clock))
    assert rig.gpus.energy_update_period_s() == pytest.approx(0.1, abs=0.01)  # probed once
    readings = itertools.count()
    read = fake.nvmlDeviceGetTotalEnergyConsumption

    def counted(handle: Any) -> int:
        next(readings)
        return read(handle)

    monkeypatch.setattr(fake, "nvmlDeviceGetTotalEnergyConsumption", counted)
    steps_per_epoch, epochs = 300, 3

    def train(run: TrainingRun) -> None:
        for epoch in run.epochs():
            for _ in run.steps(range(steps_per_epoch)):
                clock.advance(STEP_TIME_S[fake.limits_mw()[0] // 1000] / 10)
            clock.advance(EVAL_S)
            run.report_metric(epoch / epochs)

    trial = run_trial(rig, train)
    assert trial.profiler.profile.complete  # slices banked across epoch ends still finish
    assert next(readings) < steps_per_epoch * epochs / 4
    for limit_w, measured in trial.profiler.profile.measurements.items():  # 20 updates each
        assert measured.avg_power_w == pytest.approx(0.9 * limit_w, rel=0.05)
