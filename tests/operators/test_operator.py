"""ZeusTrainOperator through real Airflow 3.3 (``dag.test()``, in process) on a real SQLite store.

Replayed runs check what the operator records and publishes; runs on the fake NVML check that
power limits come back on every exit path Airflow has: success, the user's exception, on_kill
(SIGTERM), a timeout, and a predecessor killed with SIGKILL (the lease).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import pytest
from fixtures_airflow import (
    FAKE_ORIGINAL_LIMIT_MW,
    daily,
    rendered_fields,
    sync_dag,
    task_state,
    xcoms,
)
from fixtures_store import leave_lease, lose_every_trial, stored_leases, stored_trials

from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.operators.replay import replay_job_settings, replay_train
from zeus_airflow.operators.summary import XCOM_KEYS
from zeus_airflow.operators.train import OUTBOX_KEY
from zeus_airflow.testing import FakeNVML

pytestmark = pytest.mark.usefixtures("dag_test")

ORIGINAL_MW = FAKE_ORIGINAL_LIMIT_MW


def make_dag(dag_id: str, **operator_args: Any) -> Any:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(task_id="train", heartbeat_s=5, **operator_args)
    return sync_dag(dag)


def replay_dag(dag_id: str, train: Any = replay_train, **operator_args: Any) -> Any:
    return make_dag(
        dag_id,
        train=train,
        device="replay:v100:cifar100",
        **replay_job_settings("v100", "cifar100"),
        **operator_args,
    )


def fake_dag(dag_id: str, train: Any, **operator_args: Any) -> Any:
    """A job on the GPUs the task sees (``fake_gpus``), profiling 3 steps per limit (by
    steps only: its steps take 1 ms)."""
    return make_dag(
        dag_id,
        train=train,
        device="auto",
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=1.0,
        max_epochs=2,
        warmup_steps=1,
        profile_steps=2,
        warmup_s=0.0,
        profile_s=0.0,
        **operator_args,
    )


def train_steps(run: TrainingRun, steps: int, then: Any = None) -> str:
    """Train ``steps`` steps of 1 ms in one epoch, call ``then(run)``, report the target."""
    for _ in run.epochs():
        for _ in run.steps(range(steps)):
            time.sleep(0.001)
        if then is not None:
            then(run)
        run.report_metric(1.0)
    return "model.pt"


def test_three_runs_leave_three_trials_and_their_xcoms(zeus_store_url: str) -> None:
    dag = replay_dag("three_runs")
    runs = [dag.test(logical_date=daily(day)) for day in range(3)]

    rows = stored_trials(zeus_store_url)
    assert [task_state(run, "train") for run in runs] == [("success", 1)] * 3
    assert sorted(r.run_id for r in rows) == sorted(run.run_id for run in runs)
    assert all(r.status == "succeeded" and r.observed and r.measurement == "replayed" for r in rows)
    for run, row in zip(runs, rows, strict=True):
        pushed = xcoms("three_runs", run.run_id, "train")
        assert set(XCOM_KEYS) | {"return_value"} <= set(pushed)
        assert (pushed["batch_size"], pushed["power_limit_w"], pushed["epochs"]) == (
            row.batch_size,
            row.power_limit_w,
            row.epochs,
        )
        assert pushed["energy_j"] == pytest.approx(row.energy_j)
        assert pushed["cost"] == pytest.approx(row.cost)
        # The first run is the walk's start (b0); then the exploration budget has no room
        # yet for the worst case of a new size, so the best known size runs.
        assert (pushed["tries"], pushed["measurement"], pushed["reached_target"]) == (
            1,
            "replayed",
            True,
        )
        assert pushed["phase"] == ("pruning" if run is runs[0] else "exploit")
        assert pushed["default_cost"] > 0
        # The first run, of b0 to its end, prices Default: a figure from it on (issue 47).
        assert pushed["budget_left_runs"] is not None
        assert set(pushed["return_value"]) == {"epochs_to_target"}
        assert pushed["_link_ZeusJobLink"] == "/zeus/jobs/three_runs.train"
        shown = rendered_fields("three_runs", run.run_id, "train")
        assert max(map(len, shown["zeus_summary"].splitlines())) <= 100  # wrapped for reading
        summary = shown["zeus_summary"].replace("\n", " ")  # each break replaced a space
        assert f"b={row.batch_size} · {row.power_limit_w} W" in summary
        assert summary.endswith("(replayed)")
        assert ("exploited: exploring was not worth what the budget could pay" in summary) == (
            run is not runs[0]
        )
        # The same figure as the XCom's.
        assert f"budget {pushed['budget_left_runs']:.1f} Default runs' worth left" in summary
        assert shown["job_id"] == "three_runs.train"
    # The walk starts at b0; each run saw the ones before it, and the budget keeps the next
    # ones at b0 until it can afford a new size's worst case.
    b0 = replay_job_settings("v100", "cifar100")["default_batch_size"]
    assert [r.batch_size for r in rows] == [b0] * 3


def test_an_airflow_retry_replaces_the_failed_try_never_adds(zeus_store_url: str) -> None:
    returned: list[Any] = [object(), {"model": "v2"}]  # the first cannot be pushed as XCom

    def train(run: TrainingRun) -> Any:
        replay_train(run)
        return returned.pop(0)

    dag = replay_dag("retried", train, retries=1, retry_delay=timedelta(0))
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train") == ("success", 2)
    rows = stored_trials(zeus_store_url)
    assert [r.try_number for r in rows] == [1, 2]
    assert [r.observed for r in rows] == [False, True]
    # Caught before it was recorded as a success: invalid, its measurement kept, not counted.
    assert rows[0].status == "invalid" and "cannot be stored as an XCom" in rows[0].error
    assert rows[0].energy_j and rows[0].energy_j > 0
    assert xcoms("retried", dag_run.run_id, "train")["return_value"] == {"model": "v2"}


def test_a_user_exception_restores_the_limit_and_fails_with_its_traceback(
    zeus_store_url: str, fake_gpus: FakeNVML, capfd: pytest.CaptureFixture[str]
) -> None:
    fake = fake_gpus

    def diverged(run: TrainingRun) -> None:
        raise FloatingPointError("loss is nan at step 10")

    # No budget: it would keep the first run's 10 steps at the maximum limit, and the subject
    # is a limit profiling has changed.
    dag = fake_dag(
        "user_error", lambda run: train_steps(run, 10, then=diverged), exploration_budget=None
    )
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train")[0] == "failed"
    assert any(limit < ORIGINAL_MW for _, limit in fake.allowed_sets())  # it did profile
    assert fake.limits_mw() == [ORIGINAL_MW]
    log = capfd.readouterr().out
    assert "FloatingPointError: loss is nan at step 10" in log
    assert "in diverged" in log  # the user's own frame, not a wrapper's
    (row,) = stored_trials(zeus_store_url)
    assert row.status == "error" and "loss is nan" in row.error
    assert stored_leases(zeus_store_url) == []


def test_success_restores_the_original_limit_not_the_maximum(
    zeus_store_url: str, fake_gpus: FakeNVML
) -> None:
    fake = fake_gpus
    # No budget: its first week pays for profile slices from the run's measured time, and
    # on a loaded machine a slice of sleep-timed steps can cost more than it has (the
    # profile then pauses: "(8 of up to 9 limits measured ...)" in the summary). The
    # subject is the limit the finished profile leaves, which the budget does not change.
    dag = fake_dag("success", lambda run: train_steps(run, 40), exploration_budget=None)
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train") == ("success", 1)
    assert fake.limits_mw() == [ORIGINAL_MW]
    pushed = xcoms("success", dag_run.run_id, "train")
    assert pushed["measurement"] == "measured" and pushed["return_value"] == "model.pt"
    assert "(" not in rendered_fields("success", dag_run.run_id, "train")["zeus_summary"]
    assert stored_leases(zeus_store_url) == []


LIMITS_WHEN_STOPPED: list[tuple[int, ...]] = []


def sigterm_self(run: TrainingRun) -> None:
    """What the supervisor sends on "mark failed"; records the limits on_kill left."""
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except BaseException:
        LIMITS_WHEN_STOPPED.append(run.device.get_power_limits_w())
        raise


def sleep_past_timeout(run: TrainingRun) -> None:
    try:
        time.sleep(5)
    except BaseException:
        LIMITS_WHEN_STOPPED.append(run.device.get_power_limits_w())
        raise


def test_on_kill_restores_the_limit_before_training_unwinds(
    zeus_store_url: str, fake_gpus: FakeNVML
) -> None:
    LIMITS_WHEN_STOPPED.clear()
    dag = fake_dag("killed_now", lambda run: train_steps(run, 10, sigterm_self))
    dag.test(logical_date=daily(0))

    assert LIMITS_WHEN_STOPPED == [(ORIGINAL_MW // 1000,)]


@pytest.mark.parametrize(
    ("stop", "operator_args"),
    [
        (sigterm_self, {}),
        (sleep_past_timeout, {"execution_timeout": timedelta(seconds=1)}),
    ],
    ids=["on_kill", "timeout"],
)
def test_airflow_stopping_the_task_restores_the_limit(
    zeus_store_url: str, fake_gpus: FakeNVML, stop: Any, operator_args: dict[str, Any]
) -> None:
    fake = fake_gpus
    LIMITS_WHEN_STOPPED.clear()
    dag = fake_dag(
        f"stopped_{stop.__name__}",
        lambda run: train_steps(run, 10, stop),
        exploration_budget=None,
        **operator_args,
    )  # profiling at once, as above
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train")[0] == "failed"
    assert any(limit < ORIGINAL_MW for _, limit in fake.allowed_sets())
    assert len(LIMITS_WHEN_STOPPED) == 1  # training was interrupted at once
    assert fake.limits_mw() == [ORIGINAL_MW]
    (row,) = stored_trials(zeus_store_url)
    assert row.status == "error"
    assert stored_leases(zeus_store_url) == []


def dead_pid() -> int:
    """The pid of a process that was killed with SIGKILL, as the OOM killer would."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.kill()
    child.wait()
    return child.pid


def test_a_limit_left_by_a_killed_task_is_restored_by_the_next_one(
    zeus_store_url: str, fake_gpus: FakeNVML
) -> None:
    fake = fake_gpus
    seen: list[tuple[int, ...]] = []
    leave_lease(zeus_store_url, fake.gpu_uuids()[0], ORIGINAL_MW // 1000, dead_pid())
    fake.nvmlInit()
    fake.nvmlDeviceSetPowerManagementLimit(fake.nvmlDeviceGetHandleByIndex(0), 150_000)

    dag = fake_dag(
        "after_kill",
        lambda run: train_steps(run, 5, lambda r: seen.append(r.device.get_power_limits_w())),
        power_limit_mode="measure",
    )
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train") == ("success", 1)
    assert seen == [(ORIGINAL_MW // 1000,)]  # restored before training started
    assert fake.limits_mw() == [ORIGINAL_MW]
    assert stored_leases(zeus_store_url) == []


def test_a_gpu_leased_by_a_live_task_is_measured_without_touching_it(
    zeus_store_url: str, fake_gpus: FakeNVML
) -> None:
    fake = fake_gpus
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        leave_lease(zeus_store_url, fake.gpu_uuids()[0], 300, other.pid)
        dag = fake_dag("shared_gpu", lambda run: train_steps(run, 40))
        dag_run = dag.test(logical_date=daily(0))
    finally:
        other.kill()
        other.wait()

    assert task_state(dag_run, "train") == ("success", 1)
    assert fake.set_calls == []
    assert [lease.pid for lease in stored_leases(zeus_store_url)] == [other.pid]


def test_templated_fields_reach_the_train_function_and_the_store(zeus_store_url: str) -> None:
    received: list[str] = []

    def train(run: TrainingRun, day: str) -> dict[str, float]:
        received.append(day)
        return replay_train(run)

    dag = make_dag(
        "templated",
        train=train,
        device="{{ 'replay:v100:cifar100' }}",
        job_id="{{ dag.dag_id }}-model",
        train_kwargs={"day": "{{ ds }}"},
        **replay_job_settings("v100", "cifar100"),
    )
    dag_run = dag.test(logical_date=daily(4))

    assert task_state(dag_run, "train") == ("success", 1)
    assert received == ["2026-01-05"]
    assert (
        xcoms("templated", dag_run.run_id, "train")["_link_ZeusJobLink"]
        == "/zeus/jobs/templated-model"
    )
    assert [t.run_id for t in stored_trials(zeus_store_url)] == [dag_run.run_id]


SYNCHRONIZED: list[int] = []


def count_synchronize() -> None:
    SYNCHRONIZED.append(1)


def test_measure_mode_on_a_gpu_never_calls_a_setter(
    zeus_store_url: str, fake_gpus: FakeNVML
) -> None:
    """power_limit_mode="measure": NVML's setter is never called, not even to put back the
    limit; energy is still measured, every window edge synchronised (the user's own hook)."""
    SYNCHRONIZED.clear()
    dag = fake_dag(
        "measure_only",
        lambda run: train_steps(run, 40),
        power_limit_mode="measure",
        synchronize=count_synchronize,
    )
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train") == ("success", 1)
    assert fake_gpus.calls["nvmlDeviceSetPowerManagementLimit"] == 0
    assert fake_gpus.set_calls == [] and fake_gpus.limits_mw() == [ORIGINAL_MW]
    assert fake_gpus.calls["nvmlDeviceGetTotalEnergyConsumption"] > 0
    pushed = xcoms("measure_only", dag_run.run_id, "train")
    assert pushed["measurement"] == "measured" and pushed["energy_j"] > 0
    assert pushed["power_limit_w"] == ORIGINAL_MW // 1000
    # setup, run and epoch windows: each begins and ends synchronised
    assert len(SYNCHRONIZED) >= 6


def test_a_store_without_schema_fails_before_any_gpu_change(
    tmp_path: Any,
    fake_gpus: FakeNVML,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", f"sqlite:///{tmp_path / 'empty.db'}")
    dag = fake_dag("no_store", lambda run: train_steps(run, 40))
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train")[0] == "failed"
    assert fake_gpus.init_count == 0 and fake_gpus.set_calls == []  # NVML never opened
    assert "zeus-airflow db upgrade" in capfd.readouterr().out


def test_a_result_the_store_loses_fails_nothing_and_keeps_its_figures_in_xcom(
    zeus_store_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    def train(run: TrainingRun) -> dict[str, float]:
        value = replay_train(run)
        lose_every_trial(zeus_store_url)
        return value

    dag = replay_dag("lost_result", train)
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train")[0] == "success"  # the model comes first
    pushed = xcoms("lost_result", dag_run.run_id, "train")
    assert pushed["energy_j"] > 0 and pushed["measurement"] == "replayed"
    assert "return_value" in pushed
    assert pushed[OUTBOX_KEY] == []  # nothing to keep: the trial is gone for good
    log = capfd.readouterr().out
    assert "the trial is no longer there" in log and "is NOT in the store" in log
    assert "is no longer in the store: its result cannot be recorded" in log


def test_observe_mode_publishes_what_the_optimum_would_have_saved(
    zeus_store_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = replay_dag("observing", power_limit_mode="observe")
    run = dag.test(logical_date=daily(0))
    (row,) = stored_trials(zeus_store_url)
    pushed = xcoms("observing", run.run_id, "train")
    assert (
        (pushed["power_limit_w"], pushed["optimal_power_limit_w"])
        == (row.power_limit_w, row.optimal_power_limit_w)
        == (250, row.optimal_power_limit_w)
    )
    assert row.optimal_power_limit_w < 250
    assert pushed["would_save_energy_j"] == pytest.approx(row.would_save_energy_j)
    assert pushed["would_save_time_s"] == pytest.approx(row.would_save_time_s)
    assert row.would_save_energy_j > 0
    summary = rendered_fields("observing", run.run_id, "train")["zeus_summary"]
    summary = summary.replace("\n", " ")  # wrapped there; the task log has it on one line
    assert f"observe: at {row.optimal_power_limit_w} W it would have saved" in summary
    assert f"Zeus: {summary}" in capfd.readouterr().out  # the task log (dag.test prints it)


def test_a_train_function_that_skips_its_task_is_recorded_skipped(zeus_store_url: str) -> None:
    """AirflowSkipException is the user's "nothing to train today": the task is skipped as
    without Zeus, the try is kept as ``skipped`` (not an error) and judges no size."""
    from airflow.sdk.exceptions import AirflowSkipException

    def no_data_today(run: TrainingRun) -> None:
        raise AirflowSkipException("no new data today")

    dag = replay_dag("skips", train=lambda run: train_steps(run, 3, then=no_data_today))
    dag_run = dag.test(logical_date=daily(0))
    assert task_state(dag_run, "train")[0] == "skipped"
    (row,) = stored_trials(zeus_store_url)
    assert (row.status, row.observed) == ("skipped", False)
    assert "no new data today" in row.error and row.energy_j is not None
