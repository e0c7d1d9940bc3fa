"""dags/capriccio_daily.py through real Airflow: it parses light, and one day's slice is
prepared and really trained on through ``dag.test()``; a day without a slice is skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pendulum
import pytest
from fixtures_airflow import AIRFLOW_HOME, REPO, load_dag_file, sync_dag, task_state, xcoms

from zeus_airflow.capriccio.generator import CorpusSpec, write_corpus
from zeus_airflow.capriccio.job import CapriccioJob

DAG_FILE = REPO / "dags" / "capriccio_daily.py"
DAG_ID = "capriccio_daily"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short synthetic corpus: 12 days from 2009-04-06 to 2009-04-17."""
    path = tmp_path_factory.mktemp("capriccio") / "corpus.csv"
    write_corpus(CorpusSpec(days=12, tweets_per_day=1500, shift_day=None, seed=3), path)
    return path


@pytest.mark.usefixtures("airflow_db")
def test_the_dag_parses_without_pytorch_and_wires_the_slice_into_training() -> None:
    # A fresh interpreter: parsing the DAG file must not import torch (parse time stays light).
    probe = ("import sys, runpy; runpy.run_path(sys.argv[1]); "
             "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, str(DAG_FILE)], capture_output=True,
                         text=True, check=True, env={"AIRFLOW_HOME": str(AIRFLOW_HOME)})
    assert out.stdout.strip().splitlines()[-1] == "False"
    dag = load_dag_file(DAG_FILE, DAG_ID)
    assert dag.schedule == "@daily"
    prepare, train = dag.get_task("prepare_slice"), dag.get_task("train")
    assert train.upstream_task_ids == {"prepare_slice"}
    assert [a.name for a in prepare.outlets] == ["capriccio_slices"]
    assert train.window_size == 10
    assert train.device.startswith("simulated:")
    assert list(train.batch_sizes) == list(CapriccioJob().batch_sizes)
    assert "prepare_slice" in train.train_kwargs["slice_dir"]


@pytest.mark.usefixtures("dag_test")
def test_one_day_prepares_its_slice_and_retrains_on_it(corpus: Path, zeus_store_url: str
                                                       ) -> None:
    dag = sync_dag(load_dag_file(DAG_FILE, DAG_ID))
    conf = {"corpus_csv": str(corpus), "slice_size": 3000, "val_size": 600}
    day = pendulum.datetime(2009, 4, 6, tz="UTC")
    run = dag.test(logical_date=day, run_conf=conf)
    assert run.state == "success", run.state
    assert task_state(run, "train")[0] == "success"
    slice_dir = Path(xcoms(DAG_ID, run.run_id, "prepare_slice")["return_value"])
    assert slice_dir == AIRFLOW_HOME / "capriccio" / "slices" / "2009-04-06"
    manifest = json.loads((slice_dir / "slice.json").read_text())
    assert (manifest["day"], manifest["start"], manifest["train_size"]) == ("2009-04-06", 0,
                                                                          2400)
    published = xcoms(DAG_ID, run.run_id, "train")
    assert published["device_kind"] == "simulated"
    assert published["batch_size"] == CapriccioJob().default_batch_size  # pruning starts at b0
    assert published["reached_target"] is True and published["energy_j"] > 0
    assert published["return_value"]["val_accuracy"] >= CapriccioJob().target_metric


@pytest.mark.usefixtures("dag_test")
def test_a_day_without_a_slice_skips_the_run(corpus: Path, zeus_store_url: str) -> None:
    dag = sync_dag(load_dag_file(DAG_FILE, DAG_ID))
    conf = {"corpus_csv": str(corpus), "slice_size": 3000, "val_size": 600}
    late = pendulum.datetime(2009, 4, 17, tz="UTC")  # the corpus's last day: no full slice
    run = dag.test(logical_date=late, run_conf=conf)
    assert task_state(run, "prepare_slice")[0] == "skipped"
    assert task_state(run, "train")[0] == "skipped"
