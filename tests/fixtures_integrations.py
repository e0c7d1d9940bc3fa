"""For the integration tests (OpenLineage, Assets, MLflow): what a published record is
compared with, the figures the store holds for the run, read through the reports (the job
page's records) and the job's Default estimate, each computed here from the store rather than
taken from the code under test; and ``dag.test()`` of a few DAGs in a fresh Airflow process,
for a configuration Airflow reads once per process (``[openlineage]``) or without an extra."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from fixtures_airflow import PRISTINE_DB, TRACES
from scheduler_harness import airflow_home

from zeus_airflow.core.reports import RunRecord, default_estimate, runs
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.integrations.published import PUBLISHED


def stored_run(url: str, job_id: str, run_id: str) -> tuple[RunRecord, Any]:
    """The run ``run_id`` of job ``job_id`` as the store holds it, and the job's Default
    estimate per run."""
    store = SQLStore(url)
    try:
        with store.reader() as reader:
            version = reader.versions([job_id])[job_id][-1]
            found = [r for r in runs(reader, version.pk) if r.run_id == run_id]
            estimate = default_estimate(reader, version)
    finally:
        store.engine.dispose()
    assert len(found) == 1, f"{job_id} has {len(found)} runs {run_id!r} in the store"
    return found[0], estimate


def assert_equals_store(published: dict[str, Any], url: str, run_id: str) -> RunRecord:
    """Every published figure equals the store's for the run; the savings equal Default's
    estimate minus the run's figures."""
    run, estimate = stored_run(url, published["job_id"], run_id)
    expected = {f.name: getattr(run, f.name) for f in PUBLISHED if hasattr(run, f.name)}
    expected["tries"] = len(run.batch_sizes)
    for name, value in expected.items():
        assert _same(published.get(name), value), (name, published.get(name), value)
    if estimate is None:  # no run of b0 has ended yet: nothing to compare with
        assert all(published.get(f"saved_{n}") is None for n in ("energy_j", "time_s", "cost"))
        return run
    assert _same(published["saved_energy_j"], estimate.energy_j - run.energy_j)
    assert _same(published["saved_time_s"], estimate.time_s - run.time_s)
    assert _same(published["saved_cost"], estimate.cost - run.cost)
    return run


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    return bool(got == want)


DAGS = """
import pendulum
from airflow.sdk import DAG, Asset, dag, task
from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train

from failing_train import out_of_memory

START = pendulum.datetime(2026, 1, 1, tz="UTC")
SETTINGS = replay_job_settings("v100", "cifar100")


with DAG("ol_operator", schedule="@daily", start_date=START, catchup=False):
    ZeusTrainOperator(task_id="train", train=replay_train, device="replay:v100:cifar100",
                      carbon_zone="DE", carbon_source="fixed:300",
                      outlets=[Asset("model://tests/cifar100")], **SETTINGS)

MODEL = Asset("model://tests/user-extra")


def user_extra_train(run):  # writes extra["zeus"] of its own on the outlet's event
    from airflow.sdk import get_current_context

    get_current_context()["outlet_events"][MODEL].extra["zeus"] = {"owner": "the user"}
    return replay_train(run)


with DAG("ol_user_extra", schedule="@daily", start_date=START, catchup=False):
    ZeusTrainOperator(task_id="train", train=user_extra_train, device="replay:v100:cifar100",
                      outlets=[MODEL], **SETTINGS)

with DAG("ol_mlflow", schedule="@daily", start_date=START, catchup=False):
    ZeusTrainOperator(task_id="train", train=replay_train, device="replay:v100:cifar100",
                      mlflow_experiment="zeus-tests", **SETTINGS)

with DAG("ol_missed", schedule="@daily", start_date=START, catchup=False):
    ZeusTrainOperator(task_id="train", train=replay_train, device="replay:v100:cifar100",
                      fail_on_missed_target=True, **{**SETTINGS, "max_epochs": 1})

with DAG("ol_failing", schedule="@daily", start_date=START, catchup=False):
    ZeusTrainOperator(task_id="train", train=out_of_memory, device="replay:v100:cifar100",
                      **SETTINGS)


@dag(schedule="@daily", start_date=START, catchup=False)
def ol_taskflow():
    @task.zeus(device="replay:v100:cifar100", **SETTINGS)
    def train(run):
        return replay_train(run)

    train()


ol_taskflow()
"""

RUN_DAGS = """
import sys
for name in sys.argv[2].split(","):  # modules to run without, as if not installed
    if name:
        sys.modules[name] = None
import pendulum
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

DagBundlesManager().sync_bundles_to_db()
bag = DagBag(dag_folder=sys.argv[1])
sync_bag_to_db(bag, "dags-folder", None)
for dag_id in sys.argv[3:]:
    run = bag.get_dag(dag_id).test(logical_date=pendulum.datetime(2026, 1, 2, tz="UTC"))
    print("RAN", dag_id, run.run_id, run.state, flush=True)
"""


def run_dags(
    home: Path, transport: dict[str, Any], *dag_ids: str, without: tuple[str, ...] = ()
) -> dict[str, tuple[str, str]]:
    """``dag.test()`` of each DAG of :data:`DAGS` in a fresh Airflow process with this
    OpenLineage transport, the modules ``without`` missing; the run id and state of each."""
    env = airflow_home(
        home,
        PRISTINE_DB,
        extra={
            "ZEUS_TRACES_DIR": str(TRACES),
            "ZEUS_AIRFLOW_DB_URL": f"sqlite:///{home}/zeus.db",
            "PYTHONPATH": str(Path(__file__).parent),  # failing_train, for the DAG file
            "MLFLOW_TRACKING_URI": f"sqlite:///{home}/mlflow.db",
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
        },
    )
    (home / "dags" / "ol_dags.py").write_text(DAGS)
    subprocess.run(
        [str(Path(sys.executable).with_name("zeus-airflow")), "db", "upgrade"],
        env=env,
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(RUN_DAGS),
            str(home / "dags"),
            ",".join(without),
            *dag_ids,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ran = {
        line.split()[1]: (line.split()[2], line.split()[3])
        for line in done.stdout.splitlines()
        if line.startswith("RAN ")
    }
    assert set(ran) == set(dag_ids), done.stdout[-3000:] + done.stderr[-3000:]
    (home / "output.log").write_text(done.stdout + done.stderr)  # the tasks' logs among it
    return ran
