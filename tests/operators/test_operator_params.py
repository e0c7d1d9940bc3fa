"""The operator's contract at DAG-parse time: every bad argument is refused with an error that
names it, and building the operator does no work (no store, no NVML, no torch)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.operators.replay import replay_train

GOOD: dict[str, Any] = dict(
    train=replay_train,
    batch_sizes=[16, 32, 64],
    default_batch_size=32,
    target_metric=0.8,
    max_epochs=5,
)


def build(**changes: Any) -> Any:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG("params", schedule=None):
        return ZeusTrainOperator(task_id="train", **{**GOOD, **changes})


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"train": "train.py"}, "train="),
        ({"batch_sizes": 64}, "batch_sizes="),
        ({"batch_sizes": []}, "batch_sizes="),
        ({"batch_sizes": [64, 32]}, "batch_sizes="),
        ({"default_batch_size": 48}, "default_batch_size="),
        ({"target_metric": float("nan")}, "target_metric="),
        ({"max_epochs": 0}, "max_epochs="),
        ({"eta": 1.5}, "eta="),
        ({"beta": 1.0}, "beta="),
        ({"window_size": 0}, "window_size="),
        ({"drift_detection": "yes"}, "drift_detection="),
        ({"max_tries": 0}, "max_tries="),
        ({"power_limit_mode": "fast"}, "power_limit_mode="),
        ({"power_limit_selector": "cheapest"}, "power_limit_selector="),
        ({"warmup_steps": -1}, "warmup_steps="),
        ({"profile_steps": 0}, "profile_steps="),
        ({"warmup_s": -0.5}, "warmup_s="),
        ({"profile_s": float("inf")}, "profile_s="),
        ({"profile_s": "3"}, "profile_s="),
        ({"device": "cuda:0"}, "device="),
        ({"device": "replay:v100"}, "device="),
        ({"device": "replay:v100:mnist"}, "device="),
        ({"device": "nvml:0,0"}, "device="),
        ({"heartbeat_s": 0}, "heartbeat_s="),
        ({"seed": -1}, "seed="),
    ],
)
def test_a_bad_argument_is_refused_at_parse_time_by_name(
    changes: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        build(**changes)


def test_the_device_error_lists_the_allowed_forms() -> None:
    with pytest.raises(ConfigError) as err:
        build(device="gpu0")
    assert all(
        form in str(err.value)
        for form in ("auto", "replay:<gpu>:<workload>", "simulated:<gpu>[:<workload>]")
    )


def test_defaults_and_templates_pass_unchecked_until_rendered() -> None:
    operator = build(device="{{ var.value.zeus_device }}", job_id="{{ dag.dag_id }}")
    assert build().device == "auto" and build().job_id is None
    assert operator.device.startswith("{{")
    assert {
        "job_id",
        "device",
        "train_kwargs",
        "zeus_conn_id",
        "traces_dir",
        "zeus_summary",
    } <= set(operator.template_fields)


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_parsing_a_dag_opens_nothing_and_imports_no_torch_or_nvml() -> None:
    loaded = run_python("""
        import sys
        from airflow.sdk import DAG
        from zeus_airflow import ZeusTrainOperator
        with DAG("parse_only", schedule="@daily"):
            ZeusTrainOperator(task_id="t", train=print, batch_sizes=[8, 16],
                              default_batch_size=16, target_metric=0.5, max_epochs=3)
        print(sorted(m for m in ("torch", "pynvml", "zeus_airflow.core.train.engine",
                                 "zeus_airflow.core.store.sql", "zeus_airflow.hooks.store")
                     if m in sys.modules))
    """)
    assert loaded == "[]"


def test_the_package_and_its_core_never_import_airflow() -> None:
    loaded = run_python("""
        import importlib, pkgutil, sys
        import zeus_airflow, zeus_airflow.core
        for info in pkgutil.walk_packages(zeus_airflow.core.__path__, "zeus_airflow.core."):
            importlib.import_module(info.name)
        print("airflow" in sys.modules, zeus_airflow.TrainingRun.__module__)
    """)
    assert loaded == "False zeus_airflow.core.train.run"


@pytest.mark.parametrize(
    ("energy_j", "time_s", "shown"),
    [
        (812_000.0, 6840.0, "812 kJ · 114 min"),  # hours from two hours, as in the UI
        (812_000.0, 7200.0, "812 kJ · 2 h"),
        (950.0, 42.0, "950 J · 42 s"),
        (950.0, 119.0, "950 J · 119 s"),  # minutes from two minutes
        (3.21e6, 600.0, "3.21 MJ · 10 min"),
    ],
)
def test_summary_units(energy_j: float, time_s: float, shown: str) -> None:
    from zeus_airflow.core.common.units import show_energy, show_time

    assert f"{show_energy(energy_j)} · {show_time(time_s)}" == shown
