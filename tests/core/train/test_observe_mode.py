"""Observe mode end to end: a try says the limit it trained at and, apart, the optimum it found;
what the optimum would have saved reaches the store, the XComs, the summary line (the task
log), the reports and ``zeus-airflow runs``; the Default estimate scales from the limit
trained at."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_airflow import TRACES
from fixtures_cli import run_cli
from fixtures_jobs import JOB_ID, MAX_W, observe_job

from zeus_airflow.core.common.config import ProfilerConfig
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.reports import current, default_estimate, runs, summaries
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.operators.summary import (
    SUMMARY_WIDTH,
    XCOM_KEYS,
    summary_line,
    wrap_summary,
    xcom_values,
)


@pytest.fixture(scope="module")
def cifar() -> WorkloadTrace:
    return load_workload_trace(TRACES, "v100", "cifar100")


def test_a_try_trains_at_the_maximum_and_records_the_optimum_and_the_savings(
    cifar: WorkloadTrace,
) -> None:
    store = SQLStore.in_memory()
    results = observe_job(store, cifar)
    rows = list_trials(store)
    assert len(rows) == len(results) == 3 and all(r.status == "succeeded" for r in rows)
    for result, row in zip(results, rows, strict=True):
        outcome = result.final.outcome
        assert outcome.power_limit_w == row.power_limit_w == MAX_W  # the limit trained at
        assert outcome.optimal_power_limit_w == row.optimal_power_limit_w
        assert row.optimal_power_limit_w is not None and row.optimal_power_limit_w < MAX_W
        assert outcome.observer is not None
        assert row.would_save_energy_j == pytest.approx(outcome.observer.would_save_energy_j)
        assert row.would_save_time_s == pytest.approx(outcome.observer.would_save_time_s)
        # The optimum uses less energy per step than the maximum on this trace.
        assert 0 < row.would_save_energy_j < row.energy_j
    # The first try profiled (its savings cover only the steps after profiling); the later
    # ones started at the optimum's profile and trained at the maximum all along.
    assert rows[0].would_save_energy_j < rows[1].would_save_energy_j


def test_the_xcoms_and_the_summary_line_say_what_observe_mode_would_have_saved(
    cifar: WorkloadTrace,
) -> None:
    result = observe_job(SQLStore.in_memory(), cifar, recurrences=1)[0]
    pushed = xcom_values(result)
    assert set(pushed) == set(XCOM_KEYS)
    outcome = result.final.outcome
    assert outcome.observer is not None
    assert (pushed["power_limit_w"], pushed["optimal_power_limit_w"]) == (
        MAX_W,
        outcome.optimal_power_limit_w,
    )
    assert pushed["would_save_energy_j"] == outcome.observer.would_save_energy_j > 0
    assert pushed["would_save_time_s"] == outcome.observer.would_save_time_s
    line = summary_line(result)  # the operator logs this line; zeus_summary is it wrapped
    assert f"· {MAX_W} W ·" in line
    assert f"observe: at {outcome.optimal_power_limit_w} W it would have saved " in line
    assert line.endswith("(replayed)")
    shown = wrap_summary(line)
    assert len(line) > SUMMARY_WIDTH and "\n" in shown  # too long for one line: wrapped
    assert max(map(len, shown.splitlines())) <= SUMMARY_WIDTH
    assert shown.replace("\n", " ") == line  # each break replaced a space
    assert all(not row.startswith("·") for row in shown.splitlines())


def test_the_default_estimate_scales_from_the_limit_trained_at(cifar: WorkloadTrace) -> None:
    store = SQLStore.in_memory()
    observe_job(store, cifar)
    rows = list_trials(store)
    with store.reader() as reader:
        estimate = default_estimate(reader, current(reader.versions([JOB_ID])[JOB_ID]))
    assert estimate is not None and estimate.power_limit_w == MAX_W
    # Every run trained at the maximum: Default's estimate is what they measured, unscaled.
    # (Labelled with the optimum, as before, each run would be scaled up by the profile.)
    assert estimate.energy_j == pytest.approx(sum(r.energy_j for r in rows) / len(rows))
    assert estimate.time_s == pytest.approx(sum(r.time_s for r in rows) / len(rows))


def test_the_reports_sum_what_observe_mode_would_have_saved(cifar: WorkloadTrace) -> None:
    store = SQLStore.in_memory()
    observe_job(store, cifar)
    rows = list_trials(store)
    with store.reader() as reader:
        history = reader.versions([JOB_ID])
        (summary,) = summaries(reader, [current(history[JOB_ID])], history)
        shown = runs(reader, summary.version.pk)
    observed = summary.observed
    assert observed is not None
    assert observed.would_save_energy_j == pytest.approx(
        sum(r.would_save_energy_j or 0 for r in rows)
    )
    assert observed.would_save_time_s == pytest.approx(sum(r.would_save_time_s or 0 for r in rows))
    assert observed.energy_j == pytest.approx(summary.energy_j)
    assert [(r.power_limit_w, r.optimal_power_limit_w, r.would_save_energy_j) for r in shown] == [
        (t.power_limit_w, t.optimal_power_limit_w, t.would_save_energy_j) for t in rows
    ]


def test_zeus_airflow_runs_shows_the_optimum_and_the_savings(
    cifar: WorkloadTrace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'zeus.db'}"
    observe_job(SQLStore(url, create_schema=True), cifar, recurrences=2)
    code, out, _ = run_cli(capsys, "runs", "--db", url)
    header, *lines = out.splitlines()
    assert code == 0 and header.endswith("would save")
    assert lines[0][header.index("would save") :].split()[1] in ("J", "kJ", "MJ")
    note = out.split("\n\n")[-1].replace("\n", " ")
    assert "observe: at the optimum it would have saved " in note
    assert "(over the 2 tries above that trained in observe mode)" in note
    _, out, _ = run_cli(capsys, "runs", "--db", url, "--wide")
    header = out.splitlines()[0]
    assert {"optimal_power_limit_w", "would_save_energy_j", "would_save_time_s"} <= set(
        header.split()
    )


def test_a_try_shorter_than_its_profile_says_so_instead_of_a_saving(cifar: WorkloadTrace) -> None:
    """A short job in observe mode trains part of a run at the limits it profiles: the
    summary says so, rather than a limit and no finding, and the next run goes on."""
    steps = ProfilerConfig(mode="observe", warmup_steps=2_000, profile_steps=2_000)
    first, second = observe_job(SQLStore.in_memory(), cifar, recurrences=2, profiler=steps)
    assert first.profile_unfinished and first.figures.would_save_energy_j is None
    # The limit it ended at (a slice's) is never reported as the optimum.
    assert first.optimal_power_limit_w is None
    assert xcom_values(first)["optimal_power_limit_w"] is None
    assert xcom_values(first)["power_limit_w"] == first.power_limit_w
    line = summary_line(first)
    assert "optim" not in line
    assert first.profile_progress is not None
    assert (
        f"power profile continues next run ({first.profile_progress.measured} of up to "
        f"{first.profile_progress.at_most} limits measured; trained at the limits being "
        f"profiled, {first.power_limit_w} W last)" in line
    )
    assert "observe:" not in line
    complete = observe_job(SQLStore.in_memory(), cifar, recurrences=1)[0]
    assert not complete.profile_unfinished
    assert "power profile" not in summary_line(complete)
    assert second.profile_unfinished or second.figures.would_save_energy_j is not None
