"""A run's figures in MLflow, through real Airflow (``dag.test()``) and a real MLflow tracking
store (SQLite, in the test's folder): a run of the operator's ``mlflow_experiment``, the run
the train function opens itself, a training that raised, and a tracking URI that cannot work,
which never fails a task that trained. Each run's metrics and params equal the store's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from failing_train import FAILS_IN_EPOCH, out_of_memory
from fixtures_airflow import daily, sync_dag, task_state, xcoms
from fixtures_integrations import stored_run

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.operators.replay import replay_job_settings, replay_train

pytestmark = pytest.mark.usefixtures("dag_test")
SETTINGS = replay_job_settings("v100", "cifar100")


LIVE_BUDGET_S = 120.0
"""``mlflow_budget_s`` where a test is about the figures reaching a live MLflow, not about the
budget: on a loaded CI machine, importing mlflow and creating its SQLite store took 18 s."""


@pytest.fixture
def tracking_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh MLflow tracking store that the task finds through MLFLOW_TRACKING_URI; no run
    left active for the next test (``dag.test`` runs tasks in this process), nor an
    experiment of this store made active by ``mlflow.set_experiment``."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    yield uri
    mlflow = sys.modules.get("mlflow")
    while mlflow is not None and mlflow.active_run() is not None:
        mlflow.end_run()
    if mlflow is not None:
        mlflow.tracking.fluent._active_experiment_id = None


def replay_dag(dag_id: str, train: Any = replay_train, **operator_args: Any) -> Any:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train",
            train=train,
            device="replay:v100:cifar100",
            **SETTINGS,
            **{"mlflow_budget_s": LIVE_BUDGET_S, **operator_args},
        )
    return sync_dag(dag)


def logged_train(run: Any) -> Any:
    """Logs a metric of its own: it must land in the run the task opened."""
    import mlflow  # the mlflow extra ([dev] has it), imported by the tests that use it

    value = replay_train(run)
    mlflow.log_metric("val_accuracy", 0.9)
    return value


def own_run_train(run: Any) -> Any:
    """Opens (and closes) its own MLflow run, as training code often does."""
    import mlflow

    mlflow.set_experiment("own-runs")
    with mlflow.start_run(run_name="mine"):
        mlflow.log_param("lr", 0.1)
        return replay_train(run)


def search_runs(experiment: str) -> list[Any]:
    import mlflow

    return list(mlflow.search_runs(experiment_names=[experiment], output_format="list"))


def assert_figures_in(mlflow_run: Any, url: str, job_id: str, run_id: str) -> None:
    """The MLflow run holds the store's figures of the run: metrics, params and tags."""
    stored, estimate = stored_run(url, job_id, run_id)
    metrics, params, tags = mlflow_run.data.metrics, mlflow_run.data.params, mlflow_run.data.tags
    assert metrics["zeus.energy_j"] == pytest.approx(stored.energy_j, rel=1e-12)
    assert metrics["zeus.time_s"] == pytest.approx(stored.time_s, rel=1e-12)
    assert metrics["zeus.cost"] == pytest.approx(stored.cost, rel=1e-12)
    assert metrics["zeus.batch_size"] == stored.batch_size
    assert metrics["zeus.power_limit_w"] == stored.power_limit_w
    assert params["zeus.batch_size"] == str(stored.batch_size)
    assert params["zeus.power_limit_w"] == str(stored.power_limit_w)
    assert tags["zeus.job_id"] == job_id and tags["zeus.phase"] == stored.phase
    assert tags["zeus.measurement"] == stored.measurement == "replayed"
    if estimate is not None:
        saved = estimate.energy_j - stored.energy_j
        assert metrics["zeus.saved_energy_j"] == pytest.approx(saved, rel=1e-9)
    if stored.emissions_g is not None:
        assert metrics["zeus.emissions_g"] == pytest.approx(stored.emissions_g, rel=1e-12)
        assert params["zeus.carbon_provenance"] == stored.carbon_provenance


def test_an_experiment_gets_a_run_with_the_figures(zeus_store_url: str, tracking_uri: str) -> None:
    dag = replay_dag(
        "mlflow_exp",
        train=logged_train,
        mlflow_experiment="zeus-{{ dag.dag_id }}",  # templated
        carbon_zone="DE",
        carbon_source="fixed:300",
    )
    dag_run = dag.test(logical_date=daily(1))

    assert task_state(dag_run, "train") == ("success", 1)
    (found,) = search_runs("zeus-mlflow_exp")
    assert found.info.run_name == f"mlflow_exp.train.{dag_run.run_id}"
    assert found.info.status == "FINISHED"
    assert found.data.metrics["val_accuracy"] == 0.9  # the train function's, same run
    assert_figures_in(found, zeus_store_url, "mlflow_exp.train", dag_run.run_id)
    label = xcoms("mlflow_exp", dag_run.run_id, "train")["zeus_mlflow"]
    assert label == {"published": True, "run_id": found.info.run_id, "why": None}


def test_the_train_function_s_own_run_gets_the_figures(
    zeus_store_url: str, tracking_uri: str
) -> None:
    dag_run = replay_dag("mlflow_own", train=own_run_train).test(logical_date=daily(1))

    assert task_state(dag_run, "train") == ("success", 1)
    (found,) = search_runs("own-runs")
    assert found.info.run_name == "mine" and found.data.params["lr"] == "0.1"
    assert_figures_in(found, zeus_store_url, "mlflow_own.train", dag_run.run_id)


def test_a_training_that_raised_ends_its_run_failed_with_what_it_measured(
    zeus_store_url: str, tracking_uri: str
) -> None:
    dag = replay_dag("mlflow_failed", train=out_of_memory, mlflow_experiment="zeus-failed")
    dag_run = dag.test(logical_date=daily(1))

    assert task_state(dag_run, "train")[0] == "failed"
    (found,) = search_runs("zeus-failed")
    assert found.info.status == "FAILED"
    stored, _ = stored_run(zeus_store_url, "mlflow_failed.train", dag_run.run_id)
    assert stored.status == "error" and stored.energy_j > 0
    assert found.data.metrics["zeus.energy_j"] == pytest.approx(stored.energy_j, rel=1e-12)
    assert found.data.metrics["zeus.epochs"] == FAILS_IN_EPOCH


def test_a_tracking_uri_that_cannot_work_never_fails_a_task_that_trained(
    zeus_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    nowhere = not_a_folder / "mlflow.db"  # no database can be made there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{nowhere}")
    dag = replay_dag("mlflow_broken", mlflow_experiment="zeus-broken")
    dag_run = dag.test(logical_date=daily(1))

    assert task_state(dag_run, "train") == ("success", 1)
    pushed = xcoms("mlflow_broken", dag_run.run_id, "train")
    stored, _ = stored_run(zeus_store_url, "mlflow_broken.train", dag_run.run_id)
    assert stored.status == "succeeded" and pushed["energy_j"] == stored.energy_j
    assert not_a_folder.read_text() == ""


@pytest.mark.parametrize("bad", ["", "   ", "exp\x00", 5])
def test_a_bad_experiment_is_refused_when_the_dag_is_parsed(bad: Any) -> None:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG("mlflow_bad", schedule=None), pytest.raises(ConfigError) as refused:
        ZeusTrainOperator(task_id="train", train=replay_train, mlflow_experiment=bad, **SETTINGS)
    assert str(refused.value).startswith(f"mlflow_experiment={bad!r} is invalid")


# --- publishing never holds training (issue 48) ----------------------------------------------
BUDGET_S = 2.0
TIMED_TASKS = """
import json, os, sys, time
import pendulum
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
from airflow.sdk import DAG
from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train

MOMENTS = {}  # when the task began, its training began and ended, and it returned


def timed_train(run):
    MOMENTS["train"] = time.monotonic()
    try:
        return replay_train(run)
    finally:
        MOMENTS["trained"] = time.monotonic()


def timed_task(dag_id, **operator_args):
    assert "mlflow" not in sys.modules, "mlflow's import is part of what is measured"
    start = pendulum.datetime(2026, 1, 1, tz="UTC")
    with DAG(dag_id, schedule="@daily", start_date=start, catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train", train=timed_train, device="replay:v100:cifar100",
            pre_execute=lambda context: MOMENTS.__setitem__("began", time.monotonic()),
            post_execute=lambda context, result: MOMENTS.__setitem__("ended", time.monotonic()),
            **replay_job_settings("v100", "cifar100"), **operator_args,
        )
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=os.devnull, load_op_links=True)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    dag_run = dag.test(logical_date=start.add(days=1))
    timed = {
        "state": str(dag_run.get_task_instance("train").state),
        "run_id": dag_run.run_id,
        "before_s": MOMENTS["train"] - MOMENTS["began"],
        "after_s": MOMENTS["ended"] - MOMENTS["trained"],
    }
    print("TIMED", dag_id, json.dumps(timed), flush=True)


timed_task("mlflow_warm")  # what the process's first task pays, whatever it publishes
timed_task("mlflow_none")
os.environ["MLFLOW_TRACKING_URI"] = sys.argv[1]
timed_task("mlflow_dead", mlflow_experiment="zeus-dead", mlflow_budget_s=float(sys.argv[2]))
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)  # as Airflow's task process ends: MLflow's requests die with their threads
"""
"""Three replayed tasks through ``dag.test()`` in a fresh process that never imported mlflow:
one that pays what the first task of a process pays, then one without MLflow and one with
``mlflow_experiment`` on the tracking server ``argv[1]`` (budget ``argv[2]``); each prints
its state, run id and seconds before and after training (the operator's ``pre_execute`` to
the train function's first line, its return to the operator's ``post_execute``)."""


def timed_tasks(folder: Path, tracking_uri: str) -> tuple[dict[str, dict[str, Any]], str]:
    """:data:`TIMED_TASKS` run from a file in ``folder`` (Airflow serializes the callables'
    source) in this test session's Airflow and Zeus store: each task's figures by DAG id, and
    the process's output (the tasks' logs among it)."""
    script = folder / "timed_tasks.py"
    script.write_text(TIMED_TASKS)
    done = subprocess.run(
        [sys.executable, str(script), tracking_uri, str(BUDGET_S)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = done.stdout + done.stderr
    timed = {
        line.split()[1]: json.loads(line.split(maxsplit=2)[2])
        for line in done.stdout.splitlines()
        if line.startswith("TIMED ")
    }
    assert set(timed) == {"mlflow_warm", "mlflow_none", "mlflow_dead"}, said[-6000:]
    assert all(t["state"] == "success" for t in timed.values()), said[-6000:]
    return timed, said


@pytest.fixture(params=["closed-port", "never-answers"])
def dead_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A tracking URI whose server is gone (a closed port: MLflow retries with backoff for
    minutes) or accepts connections but never answers (MLflow waits 120 s a request)."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        if request.param == "closed-port":
            listening.close()
        else:
            listening.listen(64)  # the kernel completes the handshakes; nobody reads
        yield f"http://127.0.0.1:{port}"


def test_a_dead_tracking_server_holds_neither_training_nor_the_task(
    zeus_store_url: str, dead_server: str, tmp_path: Path
) -> None:
    """Before training at most 1 s more than without MLflow (mlflow's import included); after
    it at most the budget more; the record labelled unpublished in the task log and the XCom
    ``zeus_mlflow``. In a fresh process that has not imported mlflow, as a task's process: its
    import (seconds) is part of what the task with MLflow pays."""
    timed, said = timed_tasks(tmp_path, dead_server)
    none, dead = timed["mlflow_none"], timed["mlflow_dead"]
    print(
        f"{dead_server}: before training {none['before_s']:.2f} s -> {dead['before_s']:.2f} s, "
        f"after {none['after_s']:.2f} s -> {dead['after_s']:.2f} s"
    )
    assert dead["before_s"] - none["before_s"] <= 1.0
    # The budget, and the task's own work after training (the record, the XComs) slowed by
    # mlflow's import still running beside it on a loaded machine: 0.1-0.5 s measured.
    assert dead["after_s"] - none["after_s"] <= BUDGET_S + 1.0
    label = xcoms("mlflow_dead", dead["run_id"], "train")["zeus_mlflow"]
    assert label["published"] is False and "within mlflow_budget_s" in label["why"]
    assert "the run's record is unpublished in MLflow" in said


CREATION_WAITS_FOR_TRAINING = threading.Event()
"""Set by the train function's first line; the run's creation waits for it."""


def late_run_train(run: Any) -> Any:
    """Begins before the task's run exists, and logs once MLFLOW_RUN_ID names it."""
    CREATION_WAITS_FOR_TRAINING.set()
    named_by = time.monotonic() + 30.0
    while "MLFLOW_RUN_ID" not in os.environ and time.monotonic() < named_by:
        time.sleep(0.05)
    return logged_train(run)


def test_what_the_train_function_logs_lands_in_a_run_created_after_training_began(
    zeus_store_url: str, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run created while the train function runs (here: once it has begun, on a SQLite
    store taken for a tracking server) is named by MLFLOW_RUN_ID, so that the train
    function's own ``mlflow.log_metric`` resumes it; the name is gone after the task."""
    from zeus_airflow.integrations import mlflow as zeus_mlflow

    create_run = zeus_mlflow._create_run

    def created_after_training_began(*args: Any) -> Any:
        assert CREATION_WAITS_FOR_TRAINING.wait(30.0)
        return create_run(*args)

    CREATION_WAITS_FOR_TRAINING.clear()
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.setattr(zeus_mlflow, "LOCAL_SCHEMES", ())  # training waits START_WAIT_S only
    monkeypatch.setattr(zeus_mlflow, "_create_run", created_after_training_began)
    dag = replay_dag("mlflow_late", train=late_run_train, mlflow_experiment="zeus-late")
    dag_run = dag.test(logical_date=daily(1))

    assert task_state(dag_run, "train") == ("success", 1)
    import mlflow

    (found,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert found.info.run_name == f"mlflow_late.train.{dag_run.run_id}"
    assert found.info.status == "FINISHED"
    assert found.data.metrics["val_accuracy"] == 0.9  # the train function's, same run
    assert_figures_in(found, zeus_store_url, "mlflow_late.train", dag_run.run_id)
    assert "MLFLOW_RUN_ID" not in os.environ and mlflow.active_run() is None
    label = xcoms("mlflow_late", dag_run.run_id, "train")["zeus_mlflow"]
    assert label == {"published": True, "run_id": found.info.run_id, "why": None}


@pytest.mark.parametrize("bad", [0, 0.5, 601, float("nan"), "10"])
def test_a_bad_mlflow_budget_is_refused_when_the_dag_is_parsed(bad: Any) -> None:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG("mlflow_bad_budget", schedule=None), pytest.raises(ConfigError) as refused:
        ZeusTrainOperator(task_id="train", train=replay_train, mlflow_budget_s=bad, **SETTINGS)
    assert "mlflow_budget_s=" in str(refused.value)
    assert "a number of seconds in [1, 600]" in str(refused.value)
