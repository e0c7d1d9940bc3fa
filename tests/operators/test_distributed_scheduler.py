"""Two-process DDP training through the real scheduler and LocalExecutor, with Airflow's
StatsD metrics on.

The task runs in a supervised task process (ORM blocked) that launches two gloo ranks; the
run's gauges come from that process's own metrics client, configured by ``[metrics]`` in the
servers' environment, to a StatsD listener on 127.0.0.1. Every process is started here and
stopped at the end.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB, TRACES
from fixtures_store import stored_trials
from paths import TESTS
from scheduler_harness import airflow_home, running_servers, wait_for_runs
from statsd_listener import StatsDListener

from zeus_airflow.operators.metrics import FIGURES

DEADLINE_S = 300.0
TARGET = TESTS / "ddp_ranks.py"

DAG_FILE = """
import pendulum
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.integrations.distributed import DistributedTraining

with DAG("zeus_ddp", schedule="@daily", start_date=pendulum.parse("{start}"), catchup=True,
         max_active_runs=1):
    ZeusTrainOperator(task_id="train", train=DistributedTraining("{target}:train_rank", 2),
                      train_kwargs={{"record_dir": "{records}", "metrics": [0.5, 0.95, 0.99]}},
                      device="simulated:v100", batch_sizes=[16, 32], default_batch_size=32,
                      target_metric=0.9, max_epochs=3, warmup_steps=1, profile_steps=1)
"""


@pytest.fixture
def statsd() -> Iterator[StatsDListener]:
    listener = StatsDListener()
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture
def servers(
    tmp_path: Path, airflow_db: Path, statsd: StatsDListener
) -> Iterator[tuple[dict[str, str], list[subprocess.Popen[bytes]]]]:
    home = tmp_path / "airflow"
    env = airflow_home(
        home,
        PRISTINE_DB,
        extra={
            "ZEUS_TRACES_DIR": str(TRACES),
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        },
    )
    records = tmp_path / "records"
    records.mkdir()
    start = datetime.now(UTC).date().isoformat()  # one run: today's midnight
    (home / "dags" / "zeus_ddp.py").write_text(
        DAG_FILE.format(start=start, target=TARGET, records=records)
    )
    with running_servers(env, tmp_path, DEADLINE_S) as started:
        yield env, started


def test_two_ranks_train_in_a_real_task_process_and_its_metrics_reach_statsd(
    servers: tuple[dict[str, str], list[subprocess.Popen[bytes]]],
    tmp_path: Path,
    statsd: StatsDListener,
) -> None:
    env, started = servers
    home = env["AIRFLOW_HOME"]
    runs = wait_for_runs(home, "zeus_ddp", 1, started, DEADLINE_S)
    logs = "\n".join(p.read_text() for p in Path(home, "logs").rglob("*.log"))

    assert [state for _, state in runs] == ["success"], logs[-4000:]
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "records").glob("*.json"))]
    assert [(r["rank"], r["world_size"], r["epochs"], r["stop_reason"]) for r in ranks] == [
        (0, 2, 2, "target"),
        (1, 2, 2, "target"),
    ]
    assert all(set(r["batches"]) == {16} for r in ranks)  # b=32 over two ranks
    (row,) = stored_trials(f"sqlite:///{home}/zeus_airflow.db")  # the embedded default
    assert (row.status, row.batch_size, row.epochs, row.measurement) == (
        "succeeded",
        32,
        2,
        "simulated",
    )
    suffix = ".zeus_ddp.train.simulated"
    gauges = statsd.wait_for("airflow.zeus.run.", 2 * len(FIGURES))
    assert gauges[f"airflow.zeus.run.energy_j{suffix}"] == pytest.approx(row.energy_j)
    assert gauges[f"airflow.zeus.run.batch_size{suffix}"] == 32
    assert gauges[f"airflow.zeus.run.power_limit_w{suffix}"] == row.power_limit_w
