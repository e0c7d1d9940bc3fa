"""Without the ``openlineage`` and ``mlflow`` extras nothing changes: the base install imports
neither, and a task with an Asset outlet trains, publishes its XComs and its asset event's
figures as before (``[openlineage]`` configured or not: without the provider nothing reads
it). The operator's own tests run without them too: ``ZEUS_TEST_WITHOUT`` (tests/conftest.py,
docs/integrations.md)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from fixtures_airflow import REPO
from fixtures_integrations import assert_equals_store, run_dags

EXTRAS = ("mlflow", "openlineage", "airflow.providers.openlineage")
"""The modules the two extras bring (``openlineage``: the client the provider needs)."""
HIDDEN = (
    "mlflow",
    "openlineage",
    "airflow.providers.openlineage.conf",
    "airflow.providers.openlineage.plugins",
    "airflow.providers.openlineage.extractors",
)
"""What is made missing to run without the extras. The provider's distribution stays
installed (Airflow reads every installed provider's info when it is imported, and would
fail on a hidden one); its runtime (configuration, listener, extractors) and the OpenLineage
client are missing, as they are without the extra."""


def test_the_extras_are_declared_and_the_tests_install_them() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras["openlineage"] == ["apache-airflow-providers-openlineage>=2.0"]
    assert extras["mlflow"] == ["mlflow-skinny>=2.12"]
    assert "zeus-airflow[openlineage,mlflow]" in extras["dev"]


def test_the_base_install_imports_neither_extra() -> None:
    """Beyond what ``import airflow`` itself loads (every installed provider's info)."""
    code = f"""
        import sys
        import airflow, airflow.sdk
        before = set(sys.modules)
        import zeus_airflow
        from zeus_airflow import ZeusTrainOperator
        import zeus_airflow.decorators.zeus, zeus_airflow.plugins.plugin
        import zeus_airflow.integrations.publishing, zeus_airflow.integrations.published
        import zeus_airflow.integrations.openlineage, zeus_airflow.integrations.mlflow
        print(sorted(m for m in set(sys.modules) - before if m.startswith({EXTRAS!r})))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.usefixtures("airflow_db")
def test_without_the_extras_a_task_trains_and_its_asset_event_has_the_figures(
    tmp_path: Path,
) -> None:
    lineage = tmp_path / "ol.jsonl"
    home = tmp_path / "airflow"
    transport = {"type": "file", "log_file_path": str(lineage), "append": True}
    ran = run_dags(home, transport, "ol_operator", "ol_mlflow", without=HIDDEN)

    run_id, state = ran["ol_operator"]
    assert state == "success" and ran["ol_mlflow"][1] == "success"
    said = (home / "output.log").read_text()  # mlflow_experiment without the extra: said
    assert "pip install 'zeus-airflow[mlflow]'" in said and "the task goes on" in said
    assert not (home / "mlflow.db").exists()
    assert not lineage.exists()  # no provider: no event, and nothing else changed
    with sqlite3.connect(home / "airflow.db") as db:
        (extra,) = db.execute("SELECT extra FROM asset_event").fetchone()
    published = json.loads(extra)["zeus"]
    assert_equals_store(published, f"sqlite:///{home}/zeus.db", run_id)
