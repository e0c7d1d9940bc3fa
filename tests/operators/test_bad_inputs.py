"""The bad-input suite (issue 11, "Strict input"): one table per entry point.

Every case is a mistake a user can make, and asserts the answer the issue asks for: an error
naming the parameter (or the problem) in one line, and nothing done meanwhile. Operator
parameters go through the constructor and through ``.partial(...).expand(...)``; device strings
through ``parse_device``; store URLs through the store's resolution chain (explicit URL,
``$ZEUS_AIRFLOW_DB_URL``, SQLStore); CLI arguments through ``zeus-airflow``'s entry point.
Train-function contract breaches are in tests/core/train/test_first_rule.py.
"""

from __future__ import annotations

import functools
import json
import socket
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pytest
import torch
from fixtures_airflow import AIRFLOW_HOME, TRACES
from fixtures_store import PG_SERVER, opened, stored_leases

from zeus_airflow.cli import main
from zeus_airflow.core.common.config import DB_INT_MAX, ConfigError
from zeus_airflow.core.devices.spec import DEVICE_FORMS, parse_device
from zeus_airflow.core.store import retry
from zeus_airflow.core.store.admin import list_jobs, list_trials
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.location import EMBEDDED_FILE, URL_ENV, open_store
from zeus_airflow.core.store.retry import RetryPolicy
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.operators.replay import replay_train

GOOD: dict[str, Any] = dict(
    train=replay_train,
    batch_sizes=[16, 32, 64],
    default_batch_size=32,
    target_metric=0.8,
    max_epochs=5,
)
INF, NAN = float("inf"), float("nan")


def _train_with_lr(run: Any, lr: float = 0.1) -> None:
    """A train function taking one keyword argument besides its TrainingRun."""


def _generator_train(run: Any) -> Any:
    for _ in run.epochs():
        yield run.epoch


async def _async_train(run: Any, lr: float = 0.1) -> None:
    for _ in run.epochs():
        run.report_metric(1.0)


# --- operator parameters ------------------------------------------------------------------
# (changes to GOOD, the parameter the error must name). Every parameter of ZeusTrainOperator.
BAD_PARAMETERS: list[tuple[dict[str, Any], str]] = [
    ({"train": "train.py"}, "train"),
    ({"train": None}, "train"),
    ({"batch_sizes": 64}, "batch_sizes"),
    ({"batch_sizes": "16,32"}, "batch_sizes"),
    ({"batch_sizes": {16: 1, 32: 1}}, "batch_sizes"),
    ({"batch_sizes": [16.0, 32.0]}, "batch_sizes"),
    ({"batch_sizes": [True, 32]}, "batch_sizes"),
    ({"batch_sizes": [16, 32, 2**31]}, "batch_sizes"),
    ({"default_batch_size": "32"}, "default_batch_size"),
    ({"default_batch_size": 32.0}, "default_batch_size"),
    ({"target_metric": "0.8"}, "target_metric"),
    ({"target_metric": INF}, "target_metric"),
    ({"target_metric": -INF}, "target_metric"),
    ({"target_metric": True}, "target_metric"),
    ({"max_epochs": "5"}, "max_epochs"),
    ({"max_epochs": 5.0}, "max_epochs"),
    ({"max_epochs": True}, "max_epochs"),
    ({"max_epochs": 2**31}, "max_epochs"),
    ({"higher_is_better": "False"}, "higher_is_better"),
    ({"higher_is_better": 0}, "higher_is_better"),
    ({"higher_is_better": None}, "higher_is_better"),
    ({"eta": "0.5"}, "eta"),
    ({"eta": True}, "eta"),
    ({"eta": NAN}, "eta"),
    ({"eta": -0.1}, "eta"),
    ({"beta": "2"}, "beta"),
    ({"beta": INF}, "beta"),
    ({"beta": NAN}, "beta"),
    ({"window_size": 10**30}, "window_size"),
    ({"window_size": 5.0}, "window_size"),
    ({"window_size": True}, "window_size"),
    ({"window_size": "10"}, "window_size"),
    ({"max_tries": 1.5}, "max_tries"),
    ({"max_tries": 2**31}, "max_tries"),
    ({"job_id": "j" * 251}, "job_id"),
    ({"job_id": ""}, "job_id"),
    ({"job_id": "   "}, "job_id"),
    ({"job_id": 5}, "job_id"),
    ({"job_id": "nightly\x00job"}, "job_id"),  # PostgreSQL refuses NUL: every run would fail
    ({"device": None}, "device"),
    ({"device": "gpu0"}, "device"),
    ({"device": "simulated:v100:mnist"}, "device"),
    ({"train_kwargs": [1, 2]}, "train_kwargs"),
    ({"train_kwargs": "lr=0.1"}, "train_kwargs"),
    ({"train_kwargs": {1: 2}}, "train_kwargs"),
    ({"train_kwargs": {"run": 1}}, "train_kwargs"),
    ({"train": _train_with_lr, "train_kwargs": {"learning_rate": 1}}, "train_kwargs"),
    ({"power_limit_mode": "OPTIMIZE"}, "power_limit_mode"),
    ({"power_limit_mode": None}, "power_limit_mode"),
    ({"power_limit_selector": ["zeus"]}, "power_limit_selector"),
    ({"max_slowdown": NAN}, "max_slowdown"),
    ({"max_slowdown": 0.5}, "max_slowdown"),
    ({"warmup_steps": "10"}, "warmup_steps"),
    ({"warmup_steps": 2**31}, "warmup_steps"),
    ({"profile_steps": True}, "profile_steps"),
    ({"seed": 2**31}, "seed"),
    ({"seed": "1"}, "seed"),
    ({"seed": 1.0}, "seed"),
    ({"zeus_conn_id": ""}, "zeus_conn_id"),
    ({"zeus_conn_id": None}, "zeus_conn_id"),
    ({"zeus_conn_id": "zeus\x00"}, "zeus_conn_id"),
    ({"carbon_conn_id": ""}, "carbon_conn_id"),
    ({"carbon_zone": ""}, "carbon_zone"),
    ({"carbon_zone": "DE\x00"}, "carbon_zone"),
    ({"carbon_zone": "DE", "start_deadline": "99999999999999d"}, "start_deadline"),
    ({"carbon_zone": "DE", "start_deadline": timedelta(days=999_999_999)}, "start_deadline"),
    ({"carbon_zone": "DE", "start_deadline": 1e300}, "start_deadline"),
    ({"traces_dir": 5}, "traces_dir"),
    ({"traces_dir": ""}, "traces_dir"),
    ({"heartbeat_s": INF}, "heartbeat_s"),
    ({"heartbeat_s": NAN}, "heartbeat_s"),
    ({"heartbeat_s": 0}, "heartbeat_s"),
    ({"heartbeat_s": -1}, "heartbeat_s"),
    ({"heartbeat_s": 3601}, "heartbeat_s"),
    ({"heartbeat_s": "60"}, "heartbeat_s"),
    ({"fail_on_missed_target": "yes"}, "fail_on_missed_target"),
    ({"fail_on_missed_target": 1}, "fail_on_missed_target"),
    ({"shared_job": "yes"}, "shared_job"),
    ({"fail_when_infeasible": "False"}, "fail_when_infeasible"),
    ({"fail_when_infeasible": None}, "fail_when_infeasible"),
    ({"synchronize": "cuda"}, "synchronize"),
    ({"cost_includes_cpu": "yes"}, "cost_includes_cpu"),
    ({"cost_includes_cpu": None}, "cost_includes_cpu"),
    ({"synchronize": _train_with_lr}, "synchronize"),  # needs an argument
    # Issue 35: ranges that mean something, and numbers Python cannot make a float of.
    ({"exploration_budget": 1e308}, "exploration_budget"),  # overflowed XComs and reports
    ({"exploration_budget": 10.5}, "exploration_budget"),
    ({"exploration_budget": 10**400}, "exploration_budget"),
    ({"beta": 1e308}, "beta"),
    ({"eta": 10**400}, "eta"),
    ({"target_metric": 10**400}, "target_metric"),
    ({"max_slowdown": 1e9}, "max_slowdown"),
    ({"warmup_s": 1e308}, "warmup_s"),
    ({"profile_s": 3601}, "profile_s"),
    ({"heartbeat_s": 0.001}, "heartbeat_s"),  # a live try's lease ran out under it
    ({"heartbeat_s": 4.9}, "heartbeat_s"),
    ({"job_id": "\ud800"}, "job_id"),  # a lone surrogate: UTF-8 cannot encode it
    ({"job_id": "nightly-\udcff"}, "job_id"),
    ({"zeus_conn_id": "zeus\ud800"}, "zeus_conn_id"),
    ({"train": _generator_train}, "train"),  # calling it runs none of its body
    ({"train": _async_train}, "train"),
    ({"train": functools.partial(_async_train, lr=1)}, "train"),
]
BAD_CARBON_PARAMETERS: list[tuple[dict[str, Any], str]] = [
    # Implausible intensities and prices (issue 27; docs/carbon.md, "Plausible values").
    ({"carbon_zone": "DE", "carbon_fallback_g_per_kwh": 1e9}, "carbon_fallback_g_per_kwh"),
    ({"carbon_zone": "DE", "carbon_fallback_g_per_kwh": 2001}, "carbon_fallback_g_per_kwh"),
    ({"carbon_zone": "DE", "carbon_source": "fixed:1e9"}, "carbon_source"),
    ({"carbon_zone": "DE", "carbon_source": "fixed:300:1e9"}, "carbon_source"),
]


@pytest.fixture
def untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point every place a store could be created at: the test asserts none appears."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(URL_ENV, f"sqlite:///{tmp_path / 'zeus.db'}")
    embedded = AIRFLOW_HOME / EMBEDDED_FILE
    existed = embedded.exists()

    def check() -> None:
        assert list(tmp_path.iterdir()) == [], "building the operator created files"
        assert embedded.exists() == existed, "building the operator created the store"

    return check


def _one_line_naming(err: BaseException, name: str) -> None:
    message = str(err)
    assert f"{name}=" in message and "\n" not in message, message
    assert "is invalid" in message


def _build(via: str, changes: dict[str, Any]) -> Any:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG("bad_inputs", schedule=None):
        if via == "constructor":
            return ZeusTrainOperator(task_id="train", **{**GOOD, **changes})
        return ZeusTrainOperator.partial(task_id="train", **{**GOOD, **changes}).expand(
            traces_dir=[None, str(TRACES)]
        )


@pytest.mark.parametrize("via", ["constructor", "partial"])
@pytest.mark.parametrize(
    ("changes", "name"),
    BAD_PARAMETERS + BAD_CARBON_PARAMETERS,
    ids=[f"{n}-{i}" for i, (_, n) in enumerate(BAD_PARAMETERS + BAD_CARBON_PARAMETERS)],
)
def test_a_bad_operator_parameter_is_refused_by_name(
    via: str, changes: dict[str, Any], name: str, untouched: Any
) -> None:
    with pytest.raises(ConfigError) as err:
        _build(via, changes)
    _one_line_naming(err.value, name)
    untouched()


def test_the_good_arguments_pass_both_ways(untouched: Any) -> None:
    """The table's baseline is itself accepted: each case fails for its own change only."""
    assert _build("constructor", {}).max_epochs == 5
    assert _build("partial", {}) is not None
    assert _build("constructor", {"train": _train_with_lr, "train_kwargs": {"lr": 0.5}})
    untouched()


REAL_NUMBERS: list[dict[str, Any]] = [
    {"eta": np.float32(0.5)},
    {"eta": Decimal("0.5")},
    {"beta": np.float64(2.0)},
    {"target_metric": np.float32(0.75)},
    {"target_metric": torch.tensor(0.75)},
    {"max_epochs": np.int64(5)},
    {"batch_sizes": [np.int64(16), np.int32(32), 64], "default_batch_size": np.int64(32)},
    {"window_size": np.int16(10), "max_tries": np.uint8(3), "seed": np.int64(7)},
    {"warmup_steps": np.int64(2), "profile_s": Decimal("0.25")},
    {"exploration_budget": np.float32(0.25), "heartbeat_s": np.float64(30)},
]


@pytest.mark.parametrize("via", ["constructor", "partial"])
@pytest.mark.parametrize("changes", REAL_NUMBERS, ids=[",".join(c) for c in REAL_NUMBERS])
def test_any_real_number_is_taken_where_numbers_go(
    via: str, changes: dict[str, Any], untouched: Any
) -> None:
    """numpy scalars, Decimal and 0-d tensors are numbers; the job keeps Python's."""
    built = _build(via, changes)
    untouched()
    given = built.partial_kwargs if via == "partial" else vars(built)  # Airflow serialises it
    for name, value in changes.items():
        kept = given[name]
        if isinstance(value, list):
            assert kept == [int(b) for b in value] and {type(b) for b in kept} == {int}
        else:
            assert kept == pytest.approx(float(value)) and type(kept) in (int, float), name
    if via == "constructor":
        assert json.loads(built.job_config("j").to_json())  # no numpy type left


BAD_EXPANSIONS: list[tuple[dict[str, Any], dict[str, list[Any]], str]] = [
    ({}, {"seed": [1, 2**31]}, "seed"),
    ({}, {"window_size": [3, 10**30]}, "window_size"),
    ({}, {"heartbeat_s": [30, INF]}, "heartbeat_s"),
    ({}, {"job_id": ["a", "j" * 251]}, "job_id"),
    ({}, {"higher_is_better": [True, "False"]}, "higher_is_better"),
    ({}, {"device": ["auto", "cuda:0"]}, "device"),
    ({}, {"train_kwargs": [{}, [1, 2]]}, "train_kwargs"),
    ({"default_batch_size": 64}, {"batch_sizes": [[16, 64], [16, 32]]}, "default_batch_size"),
]


@pytest.mark.parametrize(
    ("partial", "expanded", "name"), BAD_EXPANSIONS, ids=[n for *_, n in BAD_EXPANSIONS]
)
def test_a_bad_expanded_value_is_refused_at_parse_time(
    partial: dict[str, Any], expanded: dict[str, list[Any]], name: str, untouched: Any
) -> None:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    given = {**GOOD, **partial}
    for field in expanded:
        given.pop(field, None)
    with DAG("bad_expand", schedule=None), pytest.raises(ConfigError) as err:
        ZeusTrainOperator.partial(task_id="train", **given).expand(**expanded)
    _one_line_naming(err.value, name)
    untouched()


def test_a_default_job_id_over_the_column_says_to_pass_a_shorter_one(untouched: Any) -> None:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG("d" * 200, schedule=None), pytest.raises(ConfigError) as err:
        ZeusTrainOperator(task_id="t" * 60, **GOOD)
    _one_line_naming(err.value, "job_id")
    assert "pass a shorter job_id" in str(err.value)
    untouched()


# --- device strings -----------------------------------------------------------------------
BAD_DEVICES: list[object] = [
    "",
    " ",
    "gpu0",
    "cuda:0",
    "AUTO",
    "auto:0",
    "nvml",
    "nvml:",
    "nvml:a",
    "nvml:-1",
    "nvml:0,",
    "nvml:0,0",
    "nvml: 0",
    "nvml:０",
    f"nvml:{DB_INT_MAX + 1}",
    "NVML:0",
    "replay",
    "replay:v100",
    "replay::squad",
    "replay:v100:",
    "replay:v100:squad:x",
    "replay:v100:mnist",
    "simulated",
    "simulated:",
    "simulated:v100:mnist",
    "simulated:v100:squad:x",
    None,
    0,
    ["auto"],
]


@pytest.mark.parametrize("device", BAD_DEVICES, ids=[repr(d) for d in BAD_DEVICES])
def test_a_malformed_device_lists_the_allowed_forms(device: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_device(device)  # type: ignore[arg-type]
    message = str(err.value)
    assert message.startswith(f"device={device!r} is invalid") and "\n" not in message
    assert all(form in message for form in DEVICE_FORMS), message


# --- store URLs ---------------------------------------------------------------------------
SUPPORTED = "a SQLite URL"


def _no_retries(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the store's retry loop asks for, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", waits.append)
    return waits


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("not a url", "'not a url' is not a database URL"),
        ("mysql://zeus:secret@db.example/zeus", "uses 'mysql'"),
        ("mysql+pymysql://zeus@db.example/zeus", "uses 'mysql+pymysql'"),
        ("oracle://db.example/zeus", "uses 'oracle'"),
        ("mssql+pyodbc://db.example/zeus", "uses 'mssql+pyodbc'"),
        ("nosuchdialect://db.example/zeus", "uses 'nosuchdialect'"),
    ],
)
@pytest.mark.parametrize("path", ["explicit", "environment", "sqlstore"])
def test_an_unsupported_store_url_is_one_line_stating_both_forms(
    url: str, named: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = _no_retries(monkeypatch)
    monkeypatch.setenv(URL_ENV, url)
    with pytest.raises(StoreError) as err:
        if path == "explicit":
            open_store(url)
        elif path == "environment":
            open_store()
        else:
            SQLStore(url)
    message = str(err.value)
    assert named in message and SUPPORTED in message and "PostgreSQL URL" in message
    assert "\n" not in message and "secret" not in message and waits == []


@pytest.fixture
def pg_up(postgres_server: str) -> str:
    return postgres_server


@pytest.mark.parametrize(
    ("url", "reason", "fix"),
    [
        (
            f"{PG_SERVER}/zeus_no_such_database",
            'database "zeus_no_such_database" does not exist',
            "createdb",
        ),
        (
            PG_SERVER.replace("postgres@", "zeus_no_such_role@") + "/postgres",
            'role "zeus_no_such_role" does not exist',
            "create that role",
        ),
    ],
)
def test_a_permanent_postgresql_refusal_is_not_retried(
    url: str, reason: str, fix: str, pg_up: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = _no_retries(monkeypatch)
    policy = RetryPolicy()  # 5 tries, 7.5 s of waits in all: a retry would show
    started = time.monotonic()
    with pytest.raises(StoreError) as err:
        open_store(url, retry=policy)
    assert time.monotonic() - started < sum(policy.delays_s()) / 2
    message = str(err.value)
    assert message.startswith(reason) and fix in message and "not retried" in message
    assert "\n" not in message and waits == []


def test_a_sqlite_store_in_a_missing_folder_is_named_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gap this suite found: SQLite's 'unable to open database file' was retried for 8 s
    as a busy disk; a missing folder is permanent."""
    waits = _no_retries(monkeypatch)
    with pytest.raises(StoreError) as err:
        open_store(f"sqlite:///{tmp_path / 'no' / 'such' / 'zeus.db'}")
    message = str(err.value)
    assert f"its folder {str(tmp_path / 'no' / 'such')!r} does not exist" in message
    assert "\n" not in message and waits == []
    assert not (tmp_path / "no").exists()


def test_a_relative_sqlite_path_is_refused_creating_no_stray_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///zeus.db`` resolves against each process's current folder: every worker
    would create a store of its own there."""
    waits = _no_retries(monkeypatch)
    monkeypatch.chdir(tmp_path)
    for where in ("explicit", "environment"):
        monkeypatch.setenv(URL_ENV, "sqlite:///zeus.db")
        with pytest.raises(StoreError) as err:
            open_store("sqlite:///zeus.db" if where == "explicit" else None)
        message = str(err.value)
        assert "its path 'zeus.db' is relative" in message and "sqlite:////absolute" in message
        assert "\n" not in message and waits == []
    assert list(tmp_path.iterdir()) == []


def test_a_missing_airflow_home_is_named_and_never_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = _no_retries(monkeypatch)
    home = tmp_path / "no" / "such" / "home"
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.delenv(URL_ENV, raising=False)
    with pytest.raises(StoreError) as err:
        open_store()
    message = str(err.value)
    assert f"AIRFLOW_HOME={str(home)!r} does not exist" in message and URL_ENV in message
    assert "\n" not in message and waits == [] and not (tmp_path / "no").exists()


MOUNTED_STORE = """
import os, subprocess, sys, time
from pathlib import Path
from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.location import open_store
from zeus_airflow.core.store.sql import SQLStore

case, folder = sys.argv[1], Path(sys.argv[2])
mount = lambda *args: subprocess.run(["mount", *args], check=True)
if case == "full":
    mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder))
url = f"sqlite:///{folder}/zeus.db"
SQLStore(url, create_schema=True).engine.dispose()
if case == "full":  # fill the disk to its last byte
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, bytes(65536)):
            pass
    except OSError:
        pass
else:  # the folder read-only, as a read-only mount
    mount("--bind", str(folder), str(folder))
    mount("-o", "remount,ro,bind", str(folder))
started = time.monotonic()
try:
    open_store(url).register_job(JobConfig("j", (16, 32), 32, 0.9, 2))
    print("opened")
except StoreError as err:
    print(f"{time.monotonic() - started:.2f} {err}")
"""
"""Runs in a mount namespace of its own (``unshare -rm``: no privilege needed): a 2 MiB
tmpfs it fills, or the folder bind-mounted read-only."""


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("read-only", "is read-only (its permissions, chattr +i or a read-only mount)"),
        ("full", "is full (0 bytes free): free some space, or move the store"),
    ],
)
def test_a_sqlite_store_on_a_read_only_or_full_disk_at_start_is_named_not_retried(
    case: str, named: str, tmp_path: Path
) -> None:
    """Once retried five times (8 s) as "unreachable or busy": a read-only folder or a full
    disk is permanent, so the store says which, and how to fix it, at once."""
    import subprocess
    import sys

    folder = tmp_path / "store"
    folder.mkdir()
    done = subprocess.run(
        ["unshare", "-rm", sys.executable, "-c", MOUNTED_STORE, case, str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seconds, message = done.stdout.strip().split(" ", 1)
    assert named in message and "not retried" in message, message
    assert "unreachable or busy" not in message and "\n" not in message
    assert float(seconds) < 0.5 * sum(RetryPolicy().delays_s())  # no retry's wait


def test_an_empty_database_says_to_create_the_tables(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    with pytest.raises(StoreError) as err:
        open_store(f"sqlite:///{tmp_path / 'empty.db'}")
    assert "has no tables yet" in str(err.value) and "zeus-airflow db upgrade" in str(err.value)


# --- CLI arguments ------------------------------------------------------------------------
def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, seconds) of ``zeus-airflow argv``."""
    started = time.monotonic()
    try:
        code = main(list(argv))
    except SystemExit as done:  # argparse and ConfigError leave through parser.exit()
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err, time.monotonic() - started


def _one_error_line(err: str, command: str, named: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"zeus-airflow {command}: error: ") and named in lines[0], err
    assert "Traceback" not in err


def simulate(out: Path, *extra: str) -> list[str]:
    return [
        "simulate",
        "--traces",
        str(TRACES),
        "--output-csv",
        str(out),
        "--jobs",
        "1",
        "--gpu",
        "v100",
        "--workload",
        "squad",
        "--policy",
        "zeus",
        "--seeds",
        "1",
        "--recurrences",
        "3",
        *extra,
    ]


STORE_ARGUMENTS: list[tuple[tuple[str, ...], str, str]] = [
    (("jobs", "--db", "not a url"), "jobs", "is not a database URL"),
    (("jobs", "--db", "mysql://zeus:secret@db.example/zeus"), "jobs", "uses 'mysql'"),
    (("runs", "--db", "oracle://db.example/zeus"), "runs", "uses 'oracle'"),
    (("db", "upgrade", "--db", "mysql://db.example/zeus"), "db", "SQLite and PostgreSQL only"),
    (("reset", "--db", "not a url", "--job", "j", "--yes"), "reset", "is not a database URL"),
    (
        ("runs", "--db", "sqlite:////nonexistent-zeus-folder/zeus.db"),
        "runs",
        "'/nonexistent-zeus-folder' does not exist",
    ),
    (("runs", "--job"), "runs", "argument --job: expected one argument"),
    (("reset", "--db", "sqlite:////tmp/x.db"), "reset", "required: --job"),
    (("jobs", "--format", "xml"), "jobs", "argument --format: invalid choice"),
    (("jobs", "--no-such-option"), "", "unrecognized arguments: --no-such-option"),
    (("nosuchcommand",), "", "invalid choice: 'nosuchcommand'"),
    # '' is missing, never the default store (or every job in it)
    (("jobs", "--db", ""), "jobs", "argument --db: '' is invalid: expected a database URL"),
    (("runs", "--db", ""), "runs", "argument --db: '' is invalid"),
    (("reset", "--db", "", "--job", "j", "--yes"), "reset", "argument --db: '' is invalid"),
    (("reset", "--job", "", "--yes"), "reset", "argument --job: '' is invalid"),
    (("runs", "--job", ""), "runs", "argument --job: '' is invalid"),
    (("report", "--job", ""), "report", "argument --job: '' is invalid"),
    (("report", "--db", ""), "report", "argument --db: '' is invalid"),
    (("runs", "--conn-id", ""), "runs", "argument --conn-id: '' is invalid"),
    (("jobs", "--db", "sqlite:///zeus\x00.db"), "jobs", "argument --db: 'sqlite:///zeus\\x00"),
    (("db", "upgrade", "--db", " "), "db upgrade", "argument --db: ' ' is invalid"),
]


@pytest.mark.parametrize(
    ("argv", "command", "named"), STORE_ARGUMENTS, ids=[" ".join(a) for a, *_ in STORE_ARGUMENTS]
)
def test_a_bad_store_argument_is_one_line_without_traceback(
    argv: tuple[str, ...],
    command: str,
    named: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits = _no_retries(monkeypatch)
    code, out, err, seconds = run_cli(capsys, *argv)
    assert code != 0 and out == "" and waits == [] and seconds < 5
    lines = err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in err, err
    assert lines[0].startswith(f"zeus-airflow {command}".rstrip() + ": error: ")
    assert "secret" not in err


def test_a_refused_postgresql_store_is_one_line_from_the_cli(
    pg_up: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = _no_retries(monkeypatch)
    code, _, err, _ = run_cli(capsys, "jobs", "--db", f"{PG_SERVER}/zeus_no_such_database")
    assert code == 1 and waits == []
    _one_error_line(err, "jobs", 'database "zeus_no_such_database" does not exist: create')


SIMULATE_ARGUMENTS: list[tuple[tuple[str, ...], str]] = [
    (("--gpu", "h100"), "gpu='h100' is invalid"),
    (("--workload", "mnist"), "workload='mnist' is invalid"),
    (("--gpu", ""), "gpu='' is invalid"),
    (("--seeds", "-1"), "seeds=-1 is invalid"),
    (("--seeds", str(2**31)), f"seeds={2**31} is invalid"),
    (("--seeds", "x"), "argument --seeds: invalid int value: 'x'"),
    (("--seeds", "1.5"), "argument --seeds: invalid int value"),
    (("--eta", "2"), "eta=2.0 is invalid"),
    (("--eta", "nan"), "eta=nan is invalid"),
    (("--eta", "half"), "argument --eta: invalid float value"),
    (("--beta", "1"), "beta=1.0 is invalid"),
    (("--beta", "inf"), "beta=inf is invalid"),
    (("--window", "0"), "window_size=0 is invalid"),
    (("--window", str(10**30)), "window_size=1000000000000000000000000000000 is invalid"),
    (("--window", "x"), "argument --window: invalid int value"),
    (("--recurrences", "0"), "recurrences=0 is invalid"),
    (("--recurrences", str(2**31)), f"recurrences={2**31} is invalid"),
    (("--policy", "cheapest"), "argument --policy: invalid choice"),
    (("--traces", "/nonexistent-zeus-traces"), "traces='/nonexistent-zeus-traces' is invalid"),
    (("--plot", "/proc/zeus-plot.png"), "plot='/proc/zeus-plot.png' is invalid"),
]


@pytest.mark.parametrize(
    ("extra", "named"), SIMULATE_ARGUMENTS, ids=[" ".join(e) for e, _ in SIMULATE_ARGUMENTS]
)
def test_a_bad_simulate_argument_is_one_line_before_any_simulation(
    extra: tuple[str, ...], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err, seconds = run_cli(capsys, *simulate(tmp_path / "out.csv", *extra))
    assert code == 2 and out == "" and seconds < 10
    _one_error_line(err, "simulate", named)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the CSV


@pytest.mark.parametrize("where", ["/proc/zeus-out.csv", "folder", "file/out.csv"])
def test_an_unwritable_output_csv_is_refused_before_the_simulation(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("a file where a folder should be")
    target = Path(where) if where.startswith("/") else tmp_path / where
    (tmp_path / "folder").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    # Many recurrences: had the check come after the simulation, this would take minutes.
    code, out, err, seconds = run_cli(capsys, *simulate(target, "--recurrences", "100000"))
    assert code == 2 and out == "" and seconds < 10
    _one_error_line(err, "simulate", f"output_csv={str(target)!r} is invalid")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


GARBAGE_TRACES: dict[str, bytes] = {
    "text": b"this is not a trace\n1,2,3\n",
    "binary": bytes(range(256)) * 4,
    "columns": b"dataset,batch_size\nsquad,32\n",
    "numbers": (
        b"dataset,batch_size,target_metric,target_epoch,optimizer\nsquad,many,84.0,3,adamw\n"
    ),
}


@pytest.mark.parametrize("garbage", list(GARBAGE_TRACES))
def test_a_traces_folder_of_garbage_is_one_line_naming_it(
    garbage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "summary_train.csv").write_bytes(GARBAGE_TRACES[garbage])
    (folder / "summary_power_v100.csv").write_bytes(GARBAGE_TRACES[garbage])
    argv = simulate(tmp_path / "out.csv")
    argv[argv.index("--traces") + 1] = str(folder)
    code, out, err, _ = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    _one_error_line(err, "simulate", f"traces={str(folder)!r} is invalid")
    assert not (tmp_path / "out.csv").exists()


# --- rendered values: a template that renders to '' is missing, never the default ----------
RENDERED_BLANK: list[tuple[dict[str, Any], str]] = [
    ({"job_id": "{{ '' }}"}, "job_id=''"),
    ({"job_id": "{{ ' ' }}"}, "job_id=' '"),
    ({"job_id": "nightly{{ '\x00' }}"}, "job_id='nightly\\x00'"),
    ({"zeus_conn_id": "{{ '' }}"}, "zeus_conn_id=''"),
    ({"traces_dir": "{{ '' }}"}, "traces_dir=''"),
    ({"carbon_zone": "{{ '' }}"}, "carbon_zone=''"),
    (
        {"carbon_zone": "DE", "carbon_source": "fixed:300", "carbon_conn_id": "{{ '' }}"},
        "carbon_conn_id=''",
    ),
]


@pytest.mark.parametrize(("changes", "named"), RENDERED_BLANK, ids=[n for _, n in RENDERED_BLANK])
def test_a_template_rendering_blank_fails_the_task_by_name_before_any_work(
    changes: dict[str, Any],
    named: str,
    dag_test: None,
    zeus_store_url: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow.sdk import DAG
    from fixtures_airflow import daily, sync_dag, task_state

    from zeus_airflow import ZeusTrainOperator

    dag_id = f"rendered_blank_{abs(hash(named))}"
    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train",
            device="replay:v100:cifar100",
            **{**GOOD, "batch_sizes": [32, 64, 128], "default_batch_size": 64},
            **changes,
        )
    dag_run = sync_dag(dag).test(logical_date=daily(0))
    assert task_state(dag_run, "train")[0] == "failed"
    assert f"ConfigError: {named} is invalid" in capfd.readouterr().out
    with opened(zeus_store_url) as store:  # nothing recorded, no job created
        assert list_trials(store) == [] and list_jobs(store) == []


# --- carbon sources (issue 27): values refused before training, with where they came from ---
BAD_CSV_ROWS: list[tuple[bytes, str]] = [
    (b"2026-01-01T01:00:00Z,DE,nan,80\n", "carbon intensity nan is not a finite number"),
    (b"2026-01-01T01:00:00Z,DE,inf,80\n", "carbon intensity inf is not a finite number"),
    (b"2026-01-01T01:00:00Z,DE,-500,80\n", "carbon intensity -500.0 is not a finite number"),
    (b"2026-01-01T01:00:00Z,DE,1e9,80\n", "in [0, 2000] gCO2e/kWh"),
    (
        b"2026-01-01T01:00:00Z,DE,300,1e9\n",
        "price 1000000000.0 is not a finite number in [-1000, 20000] per MWh",
    ),
    (b"2026-01-01T01:00:00Z,DE,300,nan\n", "price nan"),
    (b"2026-01-01T01:00:00Z,DE,\xff\xfe30,80\n", "not UTF-8 text (byte 0xff)"),
]


@pytest.mark.parametrize(
    ("row", "message"), BAD_CSV_ROWS, ids=[str(i) for i in range(len(BAD_CSV_ROWS))]
)
def test_a_bad_carbon_csv_value_is_refused_with_its_file_and_line(
    tmp_path: Path, row: bytes, message: str
) -> None:
    from zeus_airflow.core.carbon.csvtrace import CsvTrace
    from zeus_airflow.core.carbon.signal import SourceError

    trace = tmp_path / "grid.csv"
    trace.write_bytes(
        b"datetime,zone,carbon_intensity_g_per_kwh,price_per_mwh\n"
        b"2026-01-01T00:00:00Z,DE,300,80\n" + row
    )
    with pytest.raises(SourceError) as err:
        CsvTrace.load(trace)
    assert str(err.value).startswith(f"{trace}, line 3: ") and message in str(err.value)
    assert "\n" not in str(err.value)


BAD_EM_EXTRAS: list[tuple[dict[str, Any], str]] = [
    ({"timeout_s": -1}, "timeout_s=-1 is invalid: expected a finite number of seconds > 0"),
    ({"timeout_s": 0}, "timeout_s=0 is invalid"),
    ({"retries": "many"}, "retries='many' is invalid: expected an integer >= 0"),
    ({"retries": 1.5}, "retries=1.5 is invalid"),
    ({"retries": -2}, "retries=-2 is invalid"),
    ({"backoff_s": "nan"}, "backoff_s='nan' is invalid"),
    ({"cache_ttl_s": [1]}, "cache_ttl_s=[1] is invalid"),
    ({"budget_s": 0}, "budget_s=0 is invalid: expected a finite number of seconds > 0"),
]


@pytest.mark.parametrize(
    ("extra", "message"),
    BAD_EM_EXTRAS,
    ids=[next(iter(e)) + str(i) for i, (e, _) in enumerate(BAD_EM_EXTRAS)],
)
def test_a_bad_electricity_maps_extra_is_refused_naming_the_connection(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], message: str
) -> None:
    """Refused as the source's error (the run's figures then fall back, labelled): a
    connection's extras never fail a task."""
    import json

    from zeus_airflow.core.carbon.signal import SourceError
    from zeus_airflow.hooks.carbon import ElectricityMapsHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_EM_BAD",
        json.dumps({"conn_type": "electricitymaps", "password": "tok", "extra": extra}),
    )
    with pytest.raises(SourceError) as err:
        ElectricityMapsHook("em_bad").get_conn()
    assert str(err.value).startswith("connection 'em_bad''s extras: ")
    assert message in str(err.value)


# --- a returned dict never takes Zeus's XComs (issue 35) --------------------------------------
FORGED = {
    "energy_j": -1.0,
    "batch_size": "mine",
    "epochs": "many",
    "cost": None,
    "zeus_outbox": "forged",
    "accuracy": 0.93,
}
"""What a train function might return under names Zeus pushes itself."""


class Declared(TypedDict):
    accuracy: float
    energy_j: float


def _declares_zeus_keys(run: Any) -> Declared:
    return {"accuracy": 0.9, "energy_j": 1.0}


def _returns_a_dict(run: Any) -> dict:  # type: ignore[type-arg]  (inferred multiple_outputs)
    replay_train(run)
    return dict(FORGED)


def _returns_with_multiple_outputs(run: Any) -> Any:
    replay_train(run)
    return dict(FORGED)


@pytest.mark.parametrize(
    ("function", "explicit"),
    [(_returns_with_multiple_outputs, True), (_returns_a_dict, None)],
    ids=["multiple_outputs=True", "-> dict"],
)
def test_a_returned_dict_never_replaces_zeus_xcoms(
    function: Any,
    explicit: bool | None,
    dag_test: None,
    zeus_store_url_both: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow.sdk import DAG, task
    from fixtures_airflow import daily, sync_dag, task_state, xcoms

    from zeus_airflow.core.store.admin import list_trials
    from zeus_airflow.operators.replay import replay_job_settings

    dag_id = f"returns_zeus_keys_{explicit}"
    options = {} if explicit is None else {"multiple_outputs": explicit}
    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        zeus = task.zeus(  # type: ignore[attr-defined]
            device="replay:v100:cifar100", **replay_job_settings("v100", "cifar100"), **options
        )
        zeus(function)()
    assert dag.get_task(function.__name__).multiple_outputs  # what Airflow would unroll
    sync_dag(dag)
    runs = [dag.test(logical_date=daily(day)) for day in (0, 1)]
    assert [task_state(r, function.__name__) for r in runs] == [("success", 1)] * 2
    log = capfd.readouterr().out
    assert "returned the key(s) ['batch_size', 'cost', 'energy_j', 'epochs', 'zeus_outbox']" in log
    store = SQLStore(zeus_store_url_both)
    rows = list_trials(store)
    store.engine.dispose()
    for run, row in zip(runs, rows, strict=True):
        pushed = xcoms(dag_id, run.run_id, function.__name__)
        # Zeus's own figures, as the store has them, not the function's.
        assert pushed["energy_j"] == pytest.approx(row.energy_j)
        assert (pushed["batch_size"], pushed["epochs"]) == (row.batch_size, row.epochs)
        assert pushed["cost"] == pytest.approx(row.cost) and pushed["zeus_outbox"] == []
        assert pushed["accuracy"] == 0.93  # its own key, under its own name
        assert pushed["return_value"] == FORGED  # the whole dict
        assert row.status == "succeeded"


def test_a_return_type_declaring_zeus_keys_is_refused_at_parse_time(untouched: Any) -> None:
    from airflow.sdk import DAG, task

    with DAG("declares_zeus_keys", schedule=None), pytest.raises(ConfigError) as err:
        job = {name: value for name, value in GOOD.items() if name != "train"}
        task.zeus(**job)(_declares_zeus_keys)()  # type: ignore[attr-defined]
    _one_line_naming(err.value, "train")
    assert "declares the key(s) ['energy_j']" in str(err.value)
    untouched()


# --- the zero-step trap (issue 35) -------------------------------------------------------------
def _forty_samples_drop_last(run: Any) -> str:
    """40 samples in a real DataLoader with drop_last: batch size 64 trains no step, and the
    function reports the target whatever it trained."""
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.arange(40, dtype=torch.float32).unsqueeze(1))
    loader = DataLoader(data, batch_size=run.batch_size, drop_last=True)
    for _ in run.epochs():
        for _ in run.steps(loader):
            time.sleep(0.002)
        run.report_metric(1.0)
    return "model.pt"


@pytest.mark.parametrize("budget", [None, 0.1])
def test_a_batch_size_that_trains_no_step_is_never_settled_on(
    budget: float | None,
    dag_test: None,
    zeus_store_url_both: str,
    fake_gpus: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Sizes [8, 16, 32, 64] on 40 samples: b=64 trains nothing. Every run succeeds and ends
    on a size that trained; b=64 is recorded as a failure of its size (``no_steps``), never
    as ``invalid`` that leaves the job where it was, so the walk moves on."""
    from airflow.sdk import DAG
    from fixtures_airflow import daily, sync_dag, task_state

    from zeus_airflow import ZeusTrainOperator
    from zeus_airflow.core.store.admin import list_trials

    dag_id = f"zero_step_{budget}"
    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train",
            train=_forty_samples_drop_last,
            device="auto",
            batch_sizes=[8, 16, 32, 64],
            default_batch_size=64 if budget else 32,  # with a budget: b0 itself is the trap
            target_metric=1.0,
            max_epochs=2,
            exploration_budget=budget,
            warmup_steps=1,
            profile_steps=1,
            warmup_s=0.0,
            profile_s=0.0,
        )
    sync_dag(dag)
    runs = [dag.test(logical_date=daily(day)) for day in range(6)]
    assert [task_state(r, "train") for r in runs] == [("success", 1)] * 6
    store = SQLStore(zeus_store_url_both)
    rows = list_trials(store)
    store.engine.dispose()
    for run in runs:  # each run's last try trained: no run settled on the empty size
        last = [r for r in rows if r.run_id == run.run_id][-1]
        assert last.steps and last.steps > 0 and last.reached_target, last
    empty = [r for r in rows if r.batch_size == 64]
    assert len(empty) == 1 and (empty[0].status, empty[0].stop_reason) == ("failed", "no_steps")
    assert not empty[0].observed and not empty[0].reached_target
    assert "batch size 64 trained no step" in capfd.readouterr().out


# --- the environment a run reads (issue 35) ----------------------------------------------------
@pytest.mark.parametrize(
    "node", ["n" * 300, "node-\udcff"], ids=["300 characters", "a byte that is not UTF-8"]
)
def test_a_bad_node_name_fails_the_task_by_name_before_any_gpu_change(
    node: str,
    migrated_url: str,
    dag_test: None,
    fake_gpus: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A 300-character ``ZEUS_AIRFLOW_NODE_NAME`` once failed at PostgreSQL's varchar(250)
    without naming the variable: now it is named before any lease or limit is written."""
    from airflow.sdk import DAG
    from fixtures_airflow import daily, sync_dag, task_state

    from zeus_airflow import ZeusTrainOperator
    from zeus_airflow.core.train.gpu_lease import NODE_NAME_ENV

    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", migrated_url)
    monkeypatch.setenv(NODE_NAME_ENV, node)
    dag_id = f"node_name_{len(node)}"
    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(task_id="train", device="auto", **GOOD)
    run = sync_dag(dag).test(logical_date=daily(0))
    assert task_state(run, "train")[0] == "failed"
    log = capfd.readouterr().out
    assert f"ConfigError: {NODE_NAME_ENV}=" in log and "at most 250 characters" in log
    assert fake_gpus.set_calls == []  # no GPU setting changed
    # No lease under the host's name nor the node's (one not UTF-8 cannot be written at all);
    # that the lease column is HOST_MAX_LENGTH long is the store's test (test_store_schema).
    for host in (socket.gethostname(), node):
        assert not host.isascii() or stored_leases(migrated_url, host) == [], host
