"""The drift experiment on the replay GPU: the drift model, the adaptation metric, the runs, the
``drift-experiment`` command and its errors."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path
from statistics import median

import pytest
from fixtures_airflow import TRACES
from usage_errors import assert_usage_error

from zeus_airflow.cli import main
from zeus_airflow.core.common.config import ConfigError, JobConfig
from zeus_airflow.core.common.traces import load_workload_trace
from zeus_airflow.core.decide.walk import pruning_state
from zeus_airflow.core.domain import ExplorationStep
from zeus_airflow.sim.drift import (
    Drift,
    DriftSpec,
    adaptation_delay,
    optima,
    run_drift,
    runs_to_separate,
)


def spec(window: int | None = 10, **changes: object) -> DriftSpec:
    values: dict[str, object] = dict(
        gpu="v100",
        workload="cifar100",
        traces_dir=str(TRACES),
        seed=1,
        switch_at=40,
        recurrences=80,
        job={"window_size": window, "exploration_budget": None},
    )
    values.update(changes)
    return DriftSpec(**values)  # type: ignore[arg-type]


def test_drift_gives_each_size_the_scaled_epochs_of_half_its_size() -> None:
    trace = load_workload_trace(TRACES, "v100", "cifar100")
    drifted = Drift(batch_scale=2.0, difficulty=1.5).apply(trace)
    assert drifted.target_epochs[256] == tuple(1.5 * e for e in trace.target_epochs[128])
    assert drifted.target_epochs[1024] == tuple(1.5 * e for e in trace.target_epochs[512])
    # Below the smallest traced size, the smallest one's epochs.
    assert drifted.target_epochs[8] == tuple(1.5 * e for e in trace.target_epochs[8])
    assert drifted.epochs == trace.epochs and drifted.batch_sizes == trace.batch_sizes


def test_the_default_drift_moves_the_optimum_up_and_makes_the_old_one_dearer() -> None:
    found = optima(spec())
    assert (found.before.batch_size, found.after.batch_size) == (128, 256)
    trace = load_workload_trace(TRACES, "v100", "cifar100")
    old_after = Drift().apply(trace).expected_epochs(128)
    assert old_after > trace.expected_epochs(128)


@pytest.mark.parametrize(
    ("drift", "message"),
    [
        (Drift(1.0, 1.0), "the optimal batch size stays 128"),
        (Drift(2.0, 50.0), "difficulty=50.0 is invalid"),
    ],
)
def test_a_drift_the_experiment_cannot_use_is_refused(drift: Drift, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        optima(spec(drift=drift))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"switch_at": 80}, "switch_at=80 is invalid"),
        ({"switch_at": 0}, "switch_at=0 is invalid"),
        ({"recurrences": 1}, "recurrences=1 is invalid"),
    ],
)
def test_bad_switch_or_length_is_named(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        spec(**changes)


def test_drift_parameters_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="batch_scale=0 is invalid"):
        Drift(batch_scale=0)
    with pytest.raises(ConfigError, match="difficulty=nan is invalid"):
        Drift(difficulty=math.nan)


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        ([1] * 5 + [2] * 10, 3),  # runs 3..12 are 8 of 10 at the new optimum
        ([2] * 12, 0),
        ([1] * 20, None),
        ([1, 1, 2, 1, 2, 2, 2, 2, 2, 2, 2, 1], 1),  # 7 of 10 from index 0, 8 from index 1
        ([2] * 9, None),  # fewer recurrences than the horizon
    ],
)
def test_adaptation_delay_is_the_start_of_the_first_mostly_new_window(
    chosen: list[int], expected: int | None
) -> None:
    assert adaptation_delay(chosen, optimum=2) == expected


def test_a_pick_of_an_indistinguishable_size_counts_toward_near_adaptation() -> None:
    chosen = [1, 1, 1, 3, 2, 3, 3, 2, 3, 2, 3, 3]
    assert adaptation_delay(chosen, optimum=2) is None
    assert adaptation_delay(chosen, optimum=2, also=(3,)) == 1  # 8 of 10 from index 1


def test_the_runs_a_test_needs_grow_as_the_gap_shrinks_against_the_spread() -> None:
    # Gap 1, variances 1 and 1: (1.96 + 0.84)^2 * 2 / 1^2 runs of each.
    assert runs_to_separate([1, 1, 3, 3], [2, 2, 4, 4]) == pytest.approx(2.8**2 * 2)
    assert runs_to_separate([1, 1, 3, 3], [1.5, 1.5, 3.5, 3.5]) == pytest.approx(2.8**2 * 8)
    assert runs_to_separate([1, 3], [3, 1]) == math.inf


def test_a_near_tie_is_indistinguishable_and_a_clear_optimum_has_none() -> None:
    """V100 squad x2 d1.2: 8 beats 12 by 1.7 % of a cost whose runs vary by 9 %, which takes
    hundreds of runs of each to show; V100 cifar100's default drift has no such rival."""
    near = optima(spec(workload="squad", switch_at=80, recurrences=200, drift=Drift(2.0, 1.2)))
    assert (near.after.batch_size, near.indistinguishable_after) == (8, (12,))
    clear = optima(spec(switch_at=80, recurrences=200))
    assert clear.after.batch_size == 256 and clear.indistinguishable_after == ()
    # Fewer recurrences after the switch leave more sizes a test cannot separate: 16 takes
    # about 60 runs of each.
    later = optima(spec(workload="squad", switch_at=150, recurrences=200, drift=Drift(2.0, 1.2)))
    assert later.indistinguishable_after == (12, 16)


def test_with_a_window_round_2_revisits_sizes_that_look_dominated_now() -> None:
    """A size far costlier today may be the optimum after a drift; pruned, it never returns."""
    config = JobConfig(
        "j", (64, 128, 256), 128, target_metric=0.9, max_epochs=10, exploration_budget=None
    )
    history = (
        ExplorationStep(128, True, 100.0),
        ExplorationStep(64, True, 400.0),
        ExplorationStep(256, True, 300.0),
        ExplorationStep(128, True, 100.0),
    )
    assert pruning_state(config, history).survivors == (128,)  # 64 and 256 skipped
    windowed = pruning_state(dataclasses.replace(config, window_size=10), history)
    assert (windowed.next_batch_size, windowed.round) == (64, 2)


def test_a_run_switches_the_replayed_epochs_at_the_given_recurrence() -> None:
    result = run_drift(spec())
    assert len(result.batch_size) == len(result.cost) == 80
    assert 256 in result.survivors_at_switch and result.can_adapt
    before, after = result.optima.before.cost, result.optima.after.cost
    assert result.regret[:40] == [c - before for c in result.cost[:40]]
    assert result.regret[40:] == [c - after for c in result.cost[40:]]
    old = [c for b, c in zip(result.batch_size, result.cost, strict=True) if b == 128]
    old_before = [
        c for b, c in zip(result.batch_size[:40], result.cost[:40], strict=True) if b == 128
    ]
    # Runs of the old optimum cost more after the switch: the replay drew drifted epochs.
    assert median(old[len(old_before) :]) > 1.2 * median(old_before)


def test_the_windowed_posterior_adapts_sooner_and_cheaper_than_the_unwindowed_one() -> None:
    # Seeds whose new optimum survives pruning (the others cannot adapt at all).
    windowed = [run_drift(spec(seed=s, switch_at=80, recurrences=150)) for s in (1, 4, 6)]
    unwindowed = [
        run_drift(spec(seed=s, window=None, switch_at=80, recurrences=150)) for s in (1, 4, 6)
    ]
    for w, u in zip(windowed, unwindowed, strict=True):
        assert w.can_adapt and u.can_adapt
        assert w.adaptation_delay is not None and u.adaptation_delay is not None
        assert w.adaptation_delay < u.adaptation_delay
    # Cheaper over the seeds (in seed 4 the unwindowed walk keeps only 128 and 256, and the
    # window's extra arms cost it a little more there).
    assert sum(w.regret_after_switch for w in windowed) < sum(
        u.regret_after_switch for u in unwindowed
    )


def experiment(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "drift-experiment",
        "--traces",
        str(TRACES),
        "--output-csv",
        str(tmp_path / "summary.csv"),
        "--jobs",
        "1",
        *extra,
    ]


def test_the_command_writes_both_csvs_the_table_and_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        experiment(
            tmp_path,
            "--seeds",
            "1",
            "2",
            "--switch-at",
            "30",
            "--recurrences",
            "60",
            "--recurrences-csv",
            str(tmp_path / "runs.csv"),
            "--plot",
            str(tmp_path / "plot.png"),
        )
    )
    assert code == 0
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["window"], r["seed"]) for r in rows} == {
        ("10", "1"),
        ("10", "2"),
        ("none", "1"),
        ("none", "2"),
    }
    assert all(r["measurement"] == "replayed" and r["optimum_after"] == "256" for r in rows)
    assert all(
        int(r["near_adaptation_delay"]) <= int(r["adaptation_delay"])
        for r in rows
        if r["adaptation_delay"]
    )  # a pick of the optimum is a near pick too
    with open(tmp_path / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 4 * 60
    assert sum(r["after_switch"] == "True" for r in runs) == 4 * 30
    out = capsys.readouterr().out
    assert "window 10" in out and "no window" in out and "replayed" in out
    assert (tmp_path / "plot.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--windows", "0"), "windows='0' is invalid"),
        (("--windows", "ten"), "windows='ten' is invalid"),
        (("--switch-at", "200"), "switch_at=200 is invalid"),
        (("--batch-scale", "-1"), "batch_scale=-1.0 is invalid"),
        (("--batch-scale", "1", "--difficulty", "1"), "the optimal batch size stays"),
        (("--workload", "mnist"), "workload='mnist' is invalid"),
        (("--eta", "1.5"), "eta=1.5 is invalid"),
    ],
)
def test_bad_arguments_exit_2_naming_the_parameter(
    tmp_path: Path, args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(capsys, experiment(tmp_path, *args), message, tmp_path / "summary.csv")


def test_the_command_compares_drift_detection_with_the_windows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        experiment(
            tmp_path,
            "--seeds",
            "1",
            "--switch-at",
            "30",
            "--recurrences",
            "60",
            "--windows",
            "detect",
            "none",
        )
    )
    assert code == 0
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = {r["window"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"detect", "none"}
    # Before the drift nothing differs: the detection found no change there.
    assert rows["detect"]["regret_before_switch"] == rows["none"]["regret_before_switch"]
    assert "detection" in capsys.readouterr().out
