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


def test_an_infeasible_job_is_explained_not_failed(client: TestClient, store: SQLStore) -> None:
    """Every size missed the target: the page says why each is out, that runs fall back, and
    which runs did; the API carries the same."""
    from fixtures_store import replay_never_reaching

    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.engine import Engine
    from zeus_airflow.core.store.base import RecurrenceKey
    from zeus_airflow.core.traces import load_workload_trace

    gpu = ReplayGPU(load_workload_trace(resolve_traces_dir(), "v100", "cifar100"))
    config = JobConfig("hard.train", (512, 1024), 1024, target_metric=0.99, max_epochs=3)
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)

    never = replay_never_reaching(gpu)

    for day in range(3):
        engine.run_recurrence(never, RecurrenceKey(f"day{day}", "hard", "train"))
    page = client.get("/jobs/hard.train")
    assert page.status_code == 200
    assert "no batch size left in play" in page.text
    assert "missed target_metric=0.99 within max_epochs=3" in page.text
    assert page.text.count('<span class="badge">fallback</span>') == 2  # days 1 and 2
    job = client.get("/api/jobs/hard.train").json()
    assert job["job"]["phase"] == "infeasible"
    reasons = {a["batch_size"]: a["reason"] for a in job["arms"]}
    assert all("missed target_metric" in reasons[b] for b in (512, 1024))
    assert [r["phase"] for r in job["runs"]] == ["pruning", "fallback", "fallback"]


def test_the_summary_line_and_the_job_page_show_a_run_alike(client: TestClient,
                                                            store: SQLStore) -> None:
    """One run of 1.5 h: the summary line (Rendered Templates, task log) and the UI format it
    with the same units module, so both read the same text. Before they shared it, this run
    read "1.5 h" in the summary and "89.8 min" on the page."""
    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.engine import Engine
    from zeus_airflow.core.replay_training import ReplayTraining
    from zeus_airflow.core.store.base import RecurrenceKey
    from zeus_airflow.core.traces import load_workload_trace
    from zeus_airflow.operators.summary import summary_line

    gpu = ReplayGPU(load_workload_trace(resolve_traces_dir(), "v100", "sentiment140"))
    config = JobConfig("units.train", (16,), 16, target_metric=0.5, max_epochs=100)
    result = Engine(store, gpu, config, seed=1, heartbeat_s=None).run_recurrence(
        ReplayTraining(gpu), RecurrenceKey("day0", "units", "train"))
    assert 3600 <= result.time_s < 7200  # between the two old switches to hours
    energy, duration = summary_line(result).split(" · ")[:2]
    page = client.get("/jobs/units.train").text
    assert (energy, duration) == ("786 kJ", "89.8 min")
    # The job's cards (one run: its totals) and the run's row in the runs table.
    assert f'<div class="value">{energy}</div>' in page
    assert f'<div class="value">{duration}</div>' in page
    assert f'<td class="num">{duration}</td>' in page
