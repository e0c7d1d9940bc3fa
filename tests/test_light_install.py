"""The base install: no torch, no matplotlib. What the scheduler and the api-server load must
not import them, and a feature that needs one says which extra to install.

A missing module is simulated the way Python itself spells it: ``sys.modules[name] = None``
makes every ``import name`` raise ModuleNotFoundError, in a subprocess so that this one keeps
its torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "matplotlib")


def run_python(code: str, *, without: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter in which the modules ``without`` are not installed."""
    hide = "".join(f"sys.modules[{name!r}] = None\n" for name in without)
    return subprocess.run(
        [sys.executable, "-c", "import sys\n" + hide + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_the_base_dependencies_leave_torch_and_matplotlib_to_extras() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {
        r.split(">")[0].split("<")[0].split("[")[0].strip().lower() for r in project["dependencies"]
    }
    assert names.isdisjoint(HEAVY) and "apache-airflow" in names
    extras = project["optional-dependencies"]
    assert extras["examples"] == ["torch>=2.4"] and extras["plots"] == ["matplotlib>=3.8"]
    # `make setup` installs .[dev]: the tests need both extras.
    assert "zeus-airflow[examples,plots,postgres]" in extras["dev"]


def test_what_the_scheduler_and_the_api_server_load_imports_neither() -> None:
    done = run_python("""
        import zeus_airflow
        from zeus_airflow import TrainingRun, ZeusTrainOperator
        import zeus_airflow.operators.train, zeus_airflow.operators.summary
        import zeus_airflow.plugins.plugin, zeus_airflow.plugins.app, zeus_airflow.plugins.pages
        import zeus_airflow.core.store.sql, zeus_airflow.hooks.store, zeus_airflow.cli
        import zeus_airflow.capriccio.job, zeus_airflow.capriccio.slicing  # DAG parse time
        import zeus_airflow.integrations.distributed, zeus_airflow.operators.metrics
        print(sorted(m for m in ("torch", "matplotlib") if m in sys.modules))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"  # Airflow may log above it


def test_a_run_on_the_replay_device_needs_neither() -> None:
    """The demo's path (engine, store, replay GPU, summary line) works with both missing."""
    done = run_python(
        """
        from zeus_airflow.core.common.config import JobConfig
        from zeus_airflow.core.devices.spec import open_device, parse_device
        from zeus_airflow.core.train.engine import Engine
        from zeus_airflow.core.train.replay_training import ReplayTraining
        from zeus_airflow.core.store.base import RecurrenceKey
        from zeus_airflow.core.store.sql import SQLStore
        from zeus_airflow.operators.summary import summary_line

        gpu = open_device(parse_device("replay:v100:cifar100"))
        config = JobConfig("light.t", (64, 128), 128, target_metric=0.5, max_epochs=50)
        engine = Engine(SQLStore.in_memory(), gpu, config, seed=1, heartbeat_s=None)
        print(summary_line(engine.run_recurrence(ReplayTraining(gpu), RecurrenceKey("r0"))))
    """,
        without=HEAVY,
    )
    assert done.returncode == 0, done.stderr
    assert "b=128" in done.stdout and "(replayed)" in done.stdout


@pytest.mark.parametrize(
    ("code", "missing", "extra"),
    [
        ("import zeus_airflow.capriccio.training", "torch", "examples"),
        ("import zeus_airflow.capriccio.model", "torch", "examples"),
        ("import zeus_airflow.examples.classifier", "torch", "examples"),
        (
            "from zeus_airflow.sim.plots import plot_simulation; plot_simulation([], 'x.png')",
            "matplotlib",
            "plots",
        ),
        (
            "from zeus_airflow.sim.drift_plot import plot_drift; plot_drift([], 'x.png')",
            "matplotlib",
            "plots",
        ),
        (
            "from zeus_airflow.capriccio.plot import plot_capriccio; "
            "plot_capriccio([], 'x.png', 't')",
            "matplotlib",
            "plots",
        ),
        (
            "from zeus_airflow.integrations.huggingface import ZeusTrainerCallback",
            "transformers",
            "huggingface",
        ),
        (
            "from zeus_airflow.integrations.lightning import ZeusLightningCallback",
            "lightning",
            "lightning",
        ),
    ],
)
def test_a_feature_without_its_extra_names_the_extra(code: str, missing: str, extra: str) -> None:
    done = run_python(code, without=(missing,))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("zeus_airflow.core.common.extras.MissingExtraError: ")
    assert f"needs {missing}" in last and f"pip install 'zeus-airflow[{extra}]'" in last


def test_a_module_missing_inside_an_installed_extra_is_not_blamed_on_the_extra() -> None:
    """torch is there but one of its own modules is not (a broken build): installing the
    extra would not help, so the original error stands."""
    done = run_python("import zeus_airflow.capriccio.model", without=("torch.nn",))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: ") and "torch.nn" in last


@pytest.mark.parametrize(
    ("args", "missing", "extra"),
    [
        (
            [
                "simulate",
                "--gpu",
                "v100",
                "--workload",
                "cifar100",
                "--policy",
                "zeus",
                "--seeds",
                "1",
                "--plot",
                "{tmp}/p.png",
                "--output-csv",
                "{tmp}/o.csv",
            ],
            "matplotlib",
            "plots",
        ),
        (["capriccio", "run", "--output-csv", "{tmp}/o.csv"], "torch", "examples"),
    ],
)
def test_a_command_without_its_extra_is_a_usage_error_before_any_work(
    tmp_path: Path, args: list[str], missing: str, extra: str
) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    if argv[0] == "simulate":
        argv[1:1] = ["--traces", os.environ["ZEUS_TRACES_DIR"]]
    done = run_python(
        f"""
        from zeus_airflow.cli import main
        sys.exit(main({argv!r}))
    """,
        without=(missing,),
    )
    assert done.returncode == 2, done.stderr
    assert f"pip install 'zeus-airflow[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o.csv").exists()  # failed before it simulated or trained
