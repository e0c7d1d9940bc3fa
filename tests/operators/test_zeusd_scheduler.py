"""A scheduled DAG under the real scheduler and LocalExecutor whose GPU limits are set through
zeusd: the task processes have no NVML of their own (no driver here), only the socket of the
fake zeusd this test serves, so every limit change goes through the daemon (``zeusd:0``:
``auto`` maps a pod's GPUs to the daemon's through NVML or /dev/dri, neither here). The limits are
profiled, then put back; the XComs and the Rendered Templates tab say it was through zeusd.

Every process is started here, on 127.0.0.1 and a tmp Unix socket, with bounded waits, and
stopped at the end.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB
from fixtures_store import stored_leases, stored_trials
from scheduler_harness import catching_up_home, running_servers, wait_for_runs

from zeus_airflow.testing import A100_SXM4, FakeNVML, FakeZeusd

RUNS = 2
DEADLINE_S = 240.0
A100 = replace(A100_SXM4, default_limit_mw=400_000)

DAG_FILE = """
import time

import pendulum
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator


def train(run):
    for _ in run.epochs():
        for _ in run.steps(range(40)):
            time.sleep(0.005)
        run.report_metric(1.0)


with DAG("zeusd_scheduled", schedule="@daily", start_date=pendulum.parse("{start}"),
         catchup=True, max_active_runs=1):
    ZeusTrainOperator(task_id="train", train=train, device="zeusd:0", batch_sizes=[32],
                      default_batch_size=32, target_metric=1.0, max_epochs=2,
                      warmup_steps=1, profile_steps=2, warmup_s=0.0, profile_s=0.0,
                      exploration_budget=None)
"""


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[FakeZeusd]:
    with FakeZeusd(tmp_path / "zeusd.sock", FakeNVML(1, A100)) as fake:
        yield fake


@pytest.fixture
def servers(
    tmp_path: Path, airflow_db: Path, daemon: FakeZeusd
) -> Iterator[tuple[dict[str, str], list[subprocess.Popen[bytes]]]]:
    """The servers on a home of their own, whose tasks are given the daemon's socket."""
    env = catching_up_home(
        tmp_path / "airflow",
        PRISTINE_DB,
        "zeusd_scheduled.py",
        DAG_FILE,
        RUNS,
        extra={"ZEUSD_SOCK_PATH": str(daemon.socket_path)},
    )
    with running_servers(env, tmp_path, DEADLINE_S) as started:
        yield env, started


def test_scheduled_runs_set_and_restore_limits_through_zeusd(
    servers: tuple[dict[str, str], list[subprocess.Popen[bytes]]], daemon: FakeZeusd, tmp_path: Path
) -> None:
    env, started = servers
    home = env["AIRFLOW_HOME"]
    runs = wait_for_runs(home, "zeusd_scheduled", RUNS, started, DEADLINE_S)
    logs = "\n".join(path.read_text() for path in tmp_path.glob("*.log"))

    assert [state for _, state in runs] == ["success"] * RUNS, logs[-4000:]
    limits_set = [mw for _, mw in daemon.set_limit_calls()]
    assert len(set(limits_set)) >= 3, limits_set  # the profiler walked the A100's range
    assert limits_set[-1] == 400_000 and daemon.nvml.limits_mw() == [400_000]  # put back

    rows = stored_trials(f"sqlite:///{home}/zeus_airflow.db")
    assert stored_leases(f"sqlite:///{home}/zeus_airflow.db") == []  # released after each restore
    assert [(r.status, r.measurement, r.gpu_model, r.power_control) for r in rows] == [
        ("succeeded", "measured", "NVIDIA A100-SXM4-40GB", "zeusd")
    ] * RUNS
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        for run_id, _ in runs:
            pushed = dict(
                db.execute(
                    "SELECT key, json(value) FROM xcom WHERE run_id = ?", (run_id,)
                ).fetchall()
            )
            assert json.loads(pushed["power_control"]) == "zeusd"
            assert json.loads(pushed["measurement"]) == "measured"
            (fields,) = db.execute(
                "SELECT rendered_fields FROM rendered_task_instance_fields WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            summary = json.loads(fields)["zeus_summary"]
            assert f"{json.loads(pushed['power_limit_w'])} W via zeusd" in summary, summary
