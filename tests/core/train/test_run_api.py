"""TrainingRun's step/epoch API, as a framework drives it, against ``run.epochs()``.

On the profiler tests' rig (a fake NVML GPU on a manual clock, so every figure is exact): a
loop written with begin_epoch/end_step/end_epoch/should_stop must give the same outcome,
the same limits and the same profile as the same loop written with epochs()/steps().
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_profiler import BATCH_SIZE, EVAL_S, STEP_TIME_S, Rig, job_config, make_rig, run_trial

from zeus_airflow.core.train.run import TrainingRun, open_run

STEPS_PER_EPOCH = 9


def with_epochs(rig: Rig, metrics: list[float]) -> Callable[[TrainingRun], None]:
    def train(run: TrainingRun) -> None:
        for epoch in run.epochs():
            for _ in run.steps(range(STEPS_PER_EPOCH)):
                rig.clock.advance(STEP_TIME_S[rig.fake.limits_mw()[0] // 1000])
            rig.clock.advance(EVAL_S)
            run.report_metric(metrics[epoch - 1])

    return train


def with_hooks(rig: Rig, metrics: list[float]) -> Callable[[TrainingRun], None]:
    """The same training, driven the way a Trainer callback drives it."""

    def train(run: TrainingRun) -> None:
        run.start_training()
        while run.should_stop() is None:
            epoch = run.begin_epoch()
            for _ in range(STEPS_PER_EPOCH):
                rig.clock.advance(STEP_TIME_S[rig.fake.limits_mw()[0] // 1000])
                run.end_step()
            rig.clock.advance(EVAL_S)
            run.report_metric(metrics[epoch - 1])
            run.end_epoch()

    return train


@pytest.mark.parametrize(
    "metrics", [[0.2, 0.5, 1.0, 1.0], [0.1] * 10], ids=["target", "max_epochs"]
)
def test_the_hook_api_and_epochs_give_the_same_run(metrics: list[float]) -> None:
    runs = []
    for style in (with_epochs, with_hooks):
        rig = make_rig()
        trial = run_trial(rig, style(rig, metrics), job_config(max_epochs=len(metrics)))
        runs.append((trial.outcome, rig.sets_w(), trial.profiler.profile.measurements))

    assert runs[0] == runs[1]
    assert runs[0][0].stop_reason == ("target" if metrics[-1] == 1.0 else "max_epochs")


def test_inside_an_epoch_only_the_target_stops_the_run() -> None:
    rig = make_rig()

    def train(run: TrainingRun) -> None:
        run.begin_epoch()
        run.end_step()
        assert run.should_stop() is None  # mid-epoch: no budget or bound check
        run.report_metric(1.0)
        assert run.should_stop() == "target"  # the target counts at once
        run.end_epoch()
        assert run.should_stop() == "target"
        with pytest.raises(RuntimeError, match="after the run stopped"):
            run.begin_epoch()

    trial = run_trial(rig, train, job_config(max_epochs=1))
    assert (trial.outcome.stop_reason, trial.outcome.epochs) == ("target", 1)


def test_epochs_out_of_order_are_refused() -> None:
    rig = make_rig()

    def train(run: TrainingRun) -> None:
        with pytest.raises(RuntimeError, match="outside an epoch"):
            run.end_epoch()
        run.begin_epoch()
        with pytest.raises(RuntimeError, match="inside epoch 1"):
            run.begin_epoch()
        run.report_metric(1.0)
        run.end_epoch()

    assert run_trial(rig, train).outcome.epochs == 1


def test_the_bound_is_judged_between_epochs_only() -> None:
    rig = make_rig()
    seen: list[str | None] = []

    def train(run: TrainingRun) -> None:
        run.begin_epoch()
        for _ in range(STEPS_PER_EPOCH):
            rig.clock.advance(0.1)
            run.end_step()
        run.report_metric(0.1)
        seen.append(run.should_stop())  # over the bound already, but mid-epoch
        run.end_epoch()
        seen.append(run.should_stop())

    with open_run(job_config(), BATCH_SIZE, rig.gpus, early_stop_cost=1e-6) as run:
        train(run)
        outcome = run.finish()
    assert seen == [None, "early_stop"]
    assert outcome.stop_reason == "early_stop"
