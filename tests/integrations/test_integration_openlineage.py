"""The ``zeus`` run facet through Airflow's real OpenLineage provider, in a fresh Airflow
process whose ``[openlineage]`` transport writes events to a file (the scheduler's side, a
real task process, is in tests/integrations/test_integration_assets.py): COMPLETE events of the
operator
and of ``@task.zeus``, FAIL events (a training that raised; a missed target with
``fail_on_missed_target``, after it published), and a misconfigured transport
that leaves the task's success alone. Each facet equals the figures the store holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from failing_train import FAILS_IN_EPOCH
from fixtures_integrations import assert_equals_store, run_dags, stored_run

from zeus_airflow.integrations.openlineage import (
    FACET_NAME,
    SCHEMA_FILE,
    SCHEMA_URL,
    facet_schema,
    shipped_schema,
)
from zeus_airflow.integrations.published import PUBLISHED

pytestmark = pytest.mark.usefixtures("airflow_db")  # the migrated DB each process starts from


def events(path: Path, dag_id: str, kind: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in found if e["eventType"] == kind and e["job"]["name"] == f"{dag_id}.train"]


def facet_of(event: dict[str, Any]) -> dict[str, Any]:
    facet = dict(event["run"]["facets"][FACET_NAME])
    assert facet.pop("_schemaURL") == SCHEMA_URL and facet.pop("_producer")
    jsonschema.validate(facet, facet_schema()["$defs"]["ZeusRunFacet"]["allOf"][1])
    return facet


def test_the_shipped_schema_is_built_from_the_declaration() -> None:
    assert shipped_schema() == facet_schema(), "regenerate it: openlineage.write_schema()"
    described = facet_schema()["$defs"]["ZeusRunFacet"]["allOf"][1]["properties"]
    assert list(described) == [f.name for f in PUBLISHED] + ["failed"]
    assert all(p["description"] for p in described.values())
    assert described["energy_j"]["description"].startswith("J")
    assert SCHEMA_URL.split("#")[0] == shipped_schema()["$id"]


def test_package_data_ships_the_schema() -> None:
    # Without the package-data entry a wheel would name a schema it does not carry.
    import fnmatch
    import tomllib

    from fixtures_airflow import REPO

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["zeus_airflow"]
    shipped = f"integrations/schemas/{SCHEMA_FILE}"
    assert (REPO / "zeus_airflow" / shipped).is_file()
    assert any(fnmatch.fnmatch(shipped, pattern) for pattern in patterns)


def test_complete_and_fail_events_carry_the_store_s_figures(tmp_path: Path) -> None:
    lineage = tmp_path / "ol.jsonl"
    home = tmp_path / "airflow"
    ran = run_dags(
        home,
        {"type": "file", "log_file_path": str(lineage), "append": True},
        "ol_operator",
        "ol_taskflow",
        "ol_failing",
        "ol_missed",
    )
    url = f"sqlite:///{home}/zeus.db"
    assert [state for _, state in ran.values()] == ["success", "success", "failed", "failed"]
    for dag_id in ("ol_operator", "ol_taskflow"):
        (complete,) = events(lineage, dag_id, "COMPLETE")
        facet = facet_of(complete)
        assert facet["job_id"] == f"{dag_id}.train" and facet["measurement"] == "replayed"
        assert_equals_store(facet, url, ran[dag_id][0])
    assert facet_of(events(lineage, "ol_operator", "COMPLETE")[0])["emissions_g"] > 0

    (failed,) = events(lineage, "ol_failing", "FAIL")
    facet = facet_of(failed)
    assert facet.pop("failed") is True
    run = assert_equals_store(facet, url, ran["ol_failing"][0])  # what it measured till it raised
    assert run.status == "error" and run.energy_j is not None and run.energy_j > 0
    assert facet["energy_j"] == run.energy_j and facet["epochs"] == FAILS_IN_EPOCH

    # Trained, published, then failed on purpose (fail_on_missed_target): the full record.
    (missed,) = events(lineage, "ol_missed", "FAIL")
    facet = facet_of(missed)
    assert facet.pop("failed") is True and facet["reached_target"] is False
    run = assert_equals_store(facet, url, ran["ol_missed"][0])
    assert run.status == "failed" and facet["tries"] == len(run.batch_sizes) >= 1


def test_a_misconfigured_transport_never_fails_a_task_that_trained(tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    unwritable = tmp_path / "no-such-folder" / "ol.jsonl"
    ran = run_dags(home, {"type": "file", "log_file_path": str(unwritable)}, "ol_operator")
    assert ran["ol_operator"][1] == "success"
    assert not unwritable.parent.exists()
    run, _ = stored_run(f"sqlite:///{home}/zeus.db", "ol_operator.train", ran["ol_operator"][0])
    assert run.status == "succeeded" and run.energy_j > 0
