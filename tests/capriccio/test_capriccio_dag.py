"""dags/capriccio_daily.py through real Airflow: it parses light, and one day's slice is
prepared and really trained on through ``dag.test()``; a day without tweets is skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pendulum
import pytest
from fixtures_airflow import AIRFLOW_HOME, REPO, load_dag_file, sync_dag, task_state, xcoms

from zeus_airflow.capriccio.corpus import read_tweets
from zeus_airflow.capriccio.generator import ensure_corpus
from zeus_airflow.capriccio.job import CapriccioJob
from zeus_airflow.capriccio.slicing import DEMO_SLICE_SIZE, DEMO_VAL_SIZE, SliceSizes, plan_slices

DAG_FILE = REPO / "dags" / "capriccio_daily.py"
DAG_ID = "capriccio_daily"


@pytest.mark.usefixtures("airflow_db")
def test_the_dag_parses_without_pytorch_and_wires_the_slice_into_training() -> None:
    # A fresh interpreter: parsing the DAG file must not import torch (parse time stays light).
    probe = "import sys, runpy; runpy.run_path(sys.argv[1]); print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe, str(DAG_FILE)],
        capture_output=True,
        text=True,
        check=True,
        env={"AIRFLOW_HOME": str(AIRFLOW_HOME)},
    )
    assert out.stdout.strip().splitlines()[-1] == "False"
    dag = load_dag_file(DAG_FILE, DAG_ID)
    assert dag.schedule == "@daily"
    prepare, train = dag.get_task("prepare_slice"), dag.get_task("train")
    assert train.upstream_task_ids == {"prepare_slice"}
    assert [a.name for a in prepare.outlets] == ["capriccio_slices"]
    assert train.window_size == 10
    assert train.device.startswith("simulated:")
    assert list(train.batch_sizes) == list(CapriccioJob().parameters["batch_sizes"])
    assert "prepare_slice" in train.train_kwargs["slice_dir"]


@pytest.mark.usefixtures("dag_test")
def test_one_day_prepares_its_slice_and_retrains_on_it(zeus_store_url: str) -> None:
    # Default params: the synthetic corpus is generated on first use, at demo slice sizes.
    dag = sync_dag(load_dag_file(DAG_FILE, DAG_ID))
    run = dag.test(logical_date=pendulum.datetime(2009, 4, 6, tz="UTC"))
    assert run.state == "success", run.state
    assert task_state(run, "train")[0] == "success"
    slice_dir = Path(xcoms(DAG_ID, run.run_id, "prepare_slice")["return_value"])
    assert slice_dir == AIRFLOW_HOME / "capriccio" / "slices" / "2009-04-06"
    manifest = json.loads((slice_dir / "slice.json").read_text())
    assert (manifest["day"], manifest["start"]) == ("2009-04-06", 0)
    assert (manifest["train_size"], manifest["val_size"]) == (
        DEMO_SLICE_SIZE - DEMO_VAL_SIZE,
        DEMO_VAL_SIZE,
    )
    published = xcoms(DAG_ID, run.run_id, "train")
    assert published["measurement"] == "simulated"
    assert (
        published["batch_size"] == CapriccioJob().parameters["default_batch_size"]
    )  # pruning starts at b0
    assert published["reached_target"] is True and published["energy_j"] > 0
    assert published["return_value"]["val_accuracy"] >= CapriccioJob().parameters["target_metric"]


@pytest.mark.usefixtures("dag_test")
def test_a_day_without_tweets_skips_the_run(zeus_store_url: str) -> None:
    corpus = ensure_corpus(AIRFLOW_HOME / "capriccio" / "synthetic.csv")
    slices = plan_slices(
        read_tweets(corpus).sorted_by_time(), SliceSizes(DEMO_SLICE_SIZE, DEMO_VAL_SIZE)
    )
    days = {s.day for s in slices}
    empty = next(
        slices[0].day + timedelta(d) for d in range(60) if slices[0].day + timedelta(d) not in days
    )
    dag = sync_dag(load_dag_file(DAG_FILE, DAG_ID))
    run = dag.test(
        logical_date=pendulum.datetime(empty.year, empty.month, empty.day, tz="UTC"),
        run_conf={"corpus_csv": str(corpus)},
    )
    assert task_state(run, "prepare_slice")[0] == "skipped"
    assert task_state(run, "train")[0] == "skipped"
