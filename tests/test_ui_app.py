"""The Zeus app in this process, logged in as a reader of every DAG, for the pages' edge
cases: an empty store, a job that has not run, a store that cannot be read. (The login itself
and per-DAG access are tested against a real api-server in test_ui_server.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from zeus_airflow.core.config import JobConfig
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.plugins import queries
from zeus_airflow.plugins.access import DagAccess


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    store = SQLStore(f"sqlite:///{tmp_path / 'zeus.db'}", create_schema=True)
    yield store
    store.engine.dispose()


@pytest.fixture
def client(airflow_db: Path, store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    from zeus_airflow.plugins.app import create_app
    from zeus_airflow.plugins.auth import dag_access

    app = create_app()
    app.dependency_overrides[dag_access] = lambda: DagAccess(all_dags=True, dag_ids=frozenset())
    monkeypatch.setattr(queries, "store", lambda: store)
    return TestClient(app, root_path="/zeus")


def test_an_empty_store_says_so(client: TestClient) -> None:
    page = client.get("/jobs")
    assert page.status_code == 200 and "No Zeus job yet" in page.text
    assert client.get("/api/jobs").json() == {"jobs": []}


def test_a_job_that_has_not_run_has_a_page(client: TestClient, store: SQLStore) -> None:
    store.register_job(JobConfig("quiet.train", (32, 64), 64, target_metric=0.9,
                                 max_epochs=5))
    page = client.get("/jobs/quiet.train")
    assert page.status_code == 200
    assert "No run yet" in page.text and "No estimate yet" in page.text
    assert page.text.count("<circle") == 0
    runs = client.get("/api/jobs/quiet.train/runs").json()
    assert (runs["total"], runs["pages"], runs["runs"]) == (0, 1, [])
    job = client.get("/api/jobs/quiet.train").json()["job"]
    assert (job["phase"], job["best_batch_size"], job["default_estimate"]) == \
        ("pruning", None, None)


def test_an_unknown_job_or_version_is_404_in_the_callers_format(client: TestClient,
                                                                 store: SQLStore) -> None:
    store.register_job(JobConfig("quiet.train", (32, 64), 64, target_metric=0.9,
                                 max_epochs=5))
    api = client.get("/api/jobs/nope")
    assert api.status_code == 404 and "nope" in api.json()["detail"]
    page = client.get("/jobs/quiet.train?version=7")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "has no version 7: it has 1" in page.text


def test_a_store_that_cannot_be_read_is_503_naming_the_store(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable() -> SQLStore:
        raise StoreError("the zeus-airflow store at postgresql+psycopg://zeus:***@db/zeus "
                         "is unreachable")

    monkeypatch.setattr(queries, "store", unreachable)
    api = client.get("/api/jobs")
    assert api.status_code == 503 and "db/zeus" in api.json()["detail"]
    page = client.get("/jobs")
    assert page.status_code == 503 and "The zeus-airflow store is unavailable" in page.text
