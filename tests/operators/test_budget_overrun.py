"""A job's first run can take it over its exploration budget (issue 47: a run 1 at 1.28 x
Default's cost while every surface showed its budget as "—"). Through real Airflow: the first
Airflow try of run 1 trains 30 epochs of the default size and raises (its cost is spent), the
retry runs the default size to its target (Default's cost is known from it). Run 1's budget
figure is the one the next decision reads, and the overrun shows on every surface: the summary
line, ``zeus-airflow runs``, the job page (its budget card and the run's row) and
``zeus-airflow report`` (its table, its note and its JSON), after run 2 too.
"""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fixtures_airflow import daily, rendered_fields, sync_dag, task_state, xcoms
from fixtures_ui import app_client

from zeus_airflow.cli import main
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.operators.replay import replay_job_settings, replay_train

pytestmark = pytest.mark.usefixtures("dag_test")

DAG_ID = "over_budget"
JOB = f"{DAG_ID}.train"
FAILED_AFTER_EPOCHS = 30
"""About half of what the default size needs to reach its target: a lost try that costs
Default far more than the 10 % budget."""


def _first_try_fails(failed: list[int]) -> Any:
    def train(run: TrainingRun) -> Any:
        if failed:
            return replay_train(run)
        failed.append(run.batch_size)
        gpu = run.device
        assert isinstance(gpu, ReplayGPU)
        gpu.use_batch_size(run.batch_size)
        for epoch in run.epochs():
            run.run_steps(gpu.steps_per_epoch(), gpu.advance_steps)
            run.report_metric(0.0)
            if epoch >= FAILED_AFTER_EPOCHS:
                raise RuntimeError("the data loader lost its bucket")
        return None

    return train


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_a_first_run_over_its_budget_shows_on_every_surface(
    zeus_store_url: str,
    airflow_db: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    failed: list[int] = []
    with DAG(DAG_ID, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train",
            train=_first_try_fails(failed),
            device="replay:v100:cifar100",
            exploration_budget=0.1,
            retries=1,
            retry_delay=timedelta(0),
            heartbeat_s=5,
            **replay_job_settings("v100", "cifar100"),
        )
    sync_dag(dag)
    first = dag.test(logical_date=daily(0))
    assert task_state(first, "train") == ("success", 2) and len(failed) == 1

    # Run 1's figure: negative, the same in its XComs and its summary line.
    left = xcoms(DAG_ID, first.run_id, "train")["budget_left_runs"]
    assert left is not None and left < -0.1, left
    over = f"over by {-left:.2g}"
    summary = rendered_fields(DAG_ID, first.run_id, "train")["zeus_summary"].replace("\n", " ")
    assert f"exploration budget {over} Default runs' worth" in summary

    # The next decision reads the same books: its log says what run 1 left.
    capfd.readouterr()
    second = dag.test(logical_date=daily(1))
    assert task_state(second, "train") == ("success", 1)
    logged = capfd.readouterr()
    assert f"({left:.2f} Default runs' worth" in logged.out + logged.err

    # zeus-airflow runs: run 1's try says it went over.
    assert main(["runs", "--db", zeus_store_url, "--job", JOB]) == 0
    table = capfd.readouterr().out
    assert over in table, table

    # zeus-airflow report: the overrun stays in the books once the budget has recovered.
    assert main(["report", "--db", zeus_store_url, "--job", JOB, "--format", "json"]) == 0
    (reported,) = json.loads(capfd.readouterr().out)["jobs"]
    assert reported["over_budget_runs"][0] == 1
    assert reported["lowest_budget_left_runs"] == pytest.approx(
        min(left, reported["budget_left_runs"])
    )
    assert main(["report", "--db", zeus_store_url, "--job", JOB]) == 0
    text = " ".join(capfd.readouterr().out.split())
    assert re.search(rf"{re.escape(JOB)}: over its exploration budget after runs? 1\b", text), text

    # The job page: the budget card, and run 1's row.
    store = SQLStore(zeus_store_url)
    try:
        page = app_client(store, monkeypatch).get(f"/jobs/{JOB}")
    finally:
        store.engine.dispose()
    assert page.status_code == 200
    card = _text(page.text.split('id="budget">', 1)[1][:1500])
    assert card.startswith("Exploration budget left"), card
    assert re.search(r"over budget after runs? 1\b", card), card
    assert f"budget {over} runs" in _text(page.text)
