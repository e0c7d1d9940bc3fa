"""Two-process DDP training (gloo, CPU) under the operator, through ``dag.test()``.

The task holds the run and the fake GPU; the ranks are real processes running real
``DistributedDataParallel`` (tests/ddp_ranks.py), launched by ``DistributedTraining``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from fixtures_airflow import FAKE_ORIGINAL_LIMIT_MW, daily, sync_dag, task_state, xcoms
from fixtures_store import stored_trials
from paths import TESTS

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.integrations.distributed import DistributedTraining
from zeus_airflow.testing import FakeNVML

pytestmark = pytest.mark.usefixtures("dag_test")

RANKS_FILE = TESTS / "ddp_ranks.py"
TARGET = f"{RANKS_FILE}:train_rank"


def ddp_dag(
    dag_id: str, record_dir: Path, batch_sizes: tuple[int, ...] = (16, 32), **train_kwargs: Any
) -> Any:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train",
            train=DistributedTraining(TARGET, nproc_per_node=2),
            train_kwargs={"record_dir": str(record_dir), **train_kwargs},
            device="auto",
            batch_sizes=list(batch_sizes),
            default_batch_size=batch_sizes[-1],
            target_metric=0.9,
            max_epochs=4,
            warmup_steps=1,
            profile_steps=1,
            warmup_s=0.0,
            profile_s=0.0,
            # The ranks' limits through the profile are the subject: no budget
            # holding its slices back.
            exploration_budget=None,
            heartbeat_s=5,
        )
    return sync_dag(dag)


def records(folder: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in folder.glob("rank*.json")}


def leftover_ranks() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children(recursive=True)
        if "zeus_airflow.integrations.distributed" in " ".join(child.cmdline())
    ]


def test_two_ranks_train_under_the_operator_and_stop_together_at_the_target(
    zeus_store_url: str, fake_gpus: FakeNVML, tmp_path: Path
) -> None:
    dag = ddp_dag("ddp_target", tmp_path, metrics=[0.5, 0.95, 0.99, 0.99])
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train") == ("success", 1)
    ranks = records(tmp_path)
    assert sorted(ranks) == [0, 1]
    for rank in ranks.values():
        assert rank["world_size"] == 2 and rank["master_addr"] == "127.0.0.1"
        # b=32 is global: 16 a rank, 64 samples a rank, 4 steps an epoch, 2 epochs.
        assert rank["batches"] == [16] * 8
        assert (rank["epochs"], rank["stop_reason"]) == (2, "target")
        assert rank["has_device"] is False  # a rank holds no device handle
    assert ranks[0]["pid"] != ranks[1]["pid"]
    (row,) = stored_trials(zeus_store_url)
    assert (row.status, row.batch_size, row.epochs, row.reached_target) == (
        "succeeded",
        32,
        2,
        True,
    )
    pushed = xcoms("ddp_target", dag_run.run_id, "train")
    assert pushed["return_value"]["world_size"] == 2
    assert pushed["energy_j"] > 0 and pushed["measurement"] == "measured"
    # The task profiled over rank 0's 8 steps (2 a limit: the maximum, the minimum, then the
    # search's first probe) and put the limit back.
    sets = [mw for _, mw in fake_gpus.allowed_sets()]
    assert sets[:2] == [300_000, 100_000] and 100_000 < sets[2] < 300_000
    assert fake_gpus.limits_mw() == [FAKE_ORIGINAL_LIMIT_MW]
    assert leftover_ranks() == []


def test_a_crashed_rank_fails_the_try_stops_the_others_and_restores_the_limit(
    zeus_store_url: str, fake_gpus: FakeNVML, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # 2 steps a limit, 4 steps an epoch: epoch 3 starts at 200 W, below the original 250 W.
    dag = ddp_dag("ddp_crash", tmp_path, fail_rank=1, fail_epoch=3, metrics=[0.1] * 4)
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train")[0] == "failed"
    assert records(tmp_path) == {}  # neither rank finished: rank 0 was stopped mid-epoch
    (row,) = stored_trials(zeus_store_url)
    assert row.status == "error"
    assert "rank 1 of 2 exited with status 1" in row.error
    assert "rank 1 ran out of memory in epoch 3" in row.error  # the rank's own traceback
    assert any(mw < FAKE_ORIGINAL_LIMIT_MW for _, mw in fake_gpus.allowed_sets())
    assert fake_gpus.limits_mw() == [FAKE_ORIGINAL_LIMIT_MW]
    assert leftover_ranks() == []
    assert "RankFailedError" in capfd.readouterr().out


def test_a_rank_cannot_ask_the_task_to_change_a_limit(
    zeus_store_url: str, fake_gpus: FakeNVML, tmp_path: Path
) -> None:
    dag = ddp_dag("ddp_rogue", tmp_path, send=[["set_power_limit_w", 100]])
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train")[0] == "failed"
    (row,) = stored_trials(zeus_store_url)
    assert "sent 'set_power_limit_w', which the task does not accept" in row.error
    assert fake_gpus.set_calls == []  # refused before training started: nothing changed
    assert leftover_ranks() == []


def test_a_batch_size_the_ranks_cannot_share_is_refused_before_anything_starts(
    zeus_store_url: str, fake_gpus: FakeNVML, tmp_path: Path
) -> None:
    dag = ddp_dag("ddp_odd", tmp_path, batch_sizes=(15, 31))
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train")[0] == "failed"
    (row,) = stored_trials(zeus_store_url)
    assert "batch size 31 is invalid for 2 ranks" in row.error
    assert fake_gpus.set_calls == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("no_colon",), "target='no_colon' is invalid"),
        ((TARGET, 0), "nproc_per_node=0 is invalid"),
    ],
)
def test_bad_arguments_are_refused_when_the_dag_is_parsed(
    args: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        DistributedTraining(*args)
