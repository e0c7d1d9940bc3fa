"""No page fails on a try that has not finished: every page and API route of the Zeus app
renders while a try is in flight (the job's very first, alone in the store, and one beside
finished runs), after a try that raised and one that missed its target, while a result waits
in the outbox (its try still "running", with no figures) and once it is recorded late; on
SQLite and PostgreSQL (issue 47: the fleet page answered 500 while any Zeus task ran).

Every route the app serves is asked for, each query that picks another read (the fleet's
sorts and filters, a run of the job page), so that a route added later without a case here
fails the coverage check rather than going untested.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from fixtures_airflow import TRACES
from fixtures_store import FAST_RETRY, StoreOutage, replay_missing_at
from fixtures_ui import OVERFLOW, Browser, artifact, open_page

from zeus_airflow.cli import main
from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, TrainFunction, record_late
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.plugins import pages, queries
from zeus_airflow.plugins.access import DagAccess
from zeus_airflow.plugins.app import create_app
from zeus_airflow.plugins.auth import dag_access
from zeus_airflow.plugins.fleet_page import SORTS

DAG, TASK = "zeus_flight", "train"
JOB = f"{DAG}.{TASK}"


@pytest.fixture
def trace() -> WorkloadTrace:
    return load_workload_trace(TRACES, "v100", "cifar100")


def _config(trace: WorkloadTrace) -> JobConfig:
    return JobConfig(
        JOB,
        trace.batch_sizes,
        trace.default_batch_size,
        trace.workload.target_metric,
        trace.workload.max_epochs,
        exploration_budget=0.1,
    )


def _client(store: SQLStore) -> TestClient:
    """The app over ``store``, as a reader of every DAG (Airflow's own per-DAG check of the
    DAG tabs let through: test_ui_server.py tests it against a real api-server)."""
    app = create_app()
    app.dependency_overrides[dag_access] = lambda: DagAccess(all_dags=True, dag_ids=frozenset())
    app.dependency_overrides[pages._READ_DAG[0].dependency] = lambda: None
    return TestClient(app, root_path="/zeus", raise_server_exceptions=False)


def _asked(run_id: str) -> list[str]:
    """Every route, with each query that reads something else."""
    job, runs = f"/jobs/{quote(JOB)}", f"/api/jobs/{quote(JOB)}"
    fleet = ["/", "/jobs", "/jobs?fallback=1", *(f"/jobs?phase={p}" for p in _PHASES)]
    fleet += [f"/jobs?sort={key}{order}" for key in SORTS for order in ("", "&desc=1")]
    return [
        *fleet,
        f"/dags/{DAG}",
        f"/dags/{DAG}/tasks/{TASK}",
        f"/dags/{DAG}/tasks/{TASK}?run_id={quote(run_id)}&map_index=-1",
        job,
        f"{job}?run_id={quote(run_id)}",
        f"{job}?version=1&page=1&per_page=5",
        "/api/jobs",
        f"/api/jobs?dag_id={DAG}",
        "/api/report",
        "/api/report?since=2000-01-01T00:00:00Z",
        runs,
        f"{runs}/runs",
        f"{runs}/runs?page=1&per_page=5",
        "/openapi.json",
        "/docs",
    ]


_PHASES = ("pruning", "sampling", "infeasible")


def _render_every_route(client: TestClient, run_id: str, when: str) -> None:
    """Ask for every route (``_asked``): each answers 200."""
    for path in _asked(run_id):
        answer = client.get(path)
        assert answer.status_code == 200, (when, path, answer.status_code, answer.text[-2000:])


def _in_flight(
    client: TestClient, run_id: str, when: str, then: TrainFunction, seen: list[str]
) -> TrainFunction:
    """A train function that renders every route while its own try is in flight."""

    def train(run: TrainingRun) -> object:
        _render_every_route(client, run_id, when)
        seen.append(when)
        return then(run)

    return train


def _raising(run: TrainingRun) -> object:
    for _ in run.epochs():
        run.run_steps(3, lambda steps: None)
        raise RuntimeError("the data loader lost its bucket")
    return None


def _run(
    store: SQLStore, gpu: ReplayGPU, trace: WorkloadTrace, day: int, train: TrainFunction
) -> Any:
    engine = Engine(store, gpu, _config(trace), seed=3, heartbeat_s=None)
    return engine.run_recurrence(train, RecurrenceKey(_run_id(day), DAG, TASK))


def _run_id(day: int) -> str:
    return f"scheduled__2026-11-{day + 1:02d}T00:00:00+00:00"


@pytest.fixture
def store(store_outage: StoreOutage) -> Iterator[SQLStore]:
    store = SQLStore(store_outage.url, retry=FAST_RETRY, timeout_s=0.2)
    yield store
    store.engine.dispose()


def test_every_page_renders_with_a_try_in_flight_failed_or_recorded_late(
    airflow_db: Path,
    store: SQLStore,
    store_outage: StoreOutage,
    trace: WorkloadTrace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(queries, "store", lambda: store)
    client = _client(store)
    gpu = ReplayGPU(trace)
    replay = ReplayTraining(gpu, seed=3)
    seen: list[str] = []

    # The job's first try, in flight in a store that holds nothing else.
    _run(store, gpu, trace, 0, _in_flight(client, _run_id(0), "first try in flight", replay, seen))
    _run(store, gpu, trace, 1, replay)
    # A try that raised (an error, its energy so far kept), then one that missed its target.
    with pytest.raises(RuntimeError, match="bucket"):
        _run(store, gpu, trace, 2, _raising)
    _render_every_route(client, _run_id(2), "after a try that raised")
    missing = replay_missing_at(gpu, trace.default_batch_size, seed=3)
    _run(store, gpu, trace, 3, missing)
    _render_every_route(client, _run_id(3), "after a try that missed its target")

    # A result the store could not take: its try stays "running" without figures until a
    # later run records it from the outbox.
    def cut_after(run: TrainingRun) -> object:
        value = replay(run)
        store_outage.cut()
        return value

    waiting = _run(store, gpu, trace, 4, cut_after)
    store_outage.restore()
    assert waiting.unrecorded, "the store's outage kept nothing in the outbox"
    _render_every_route(client, _run_id(4), "a result waiting in the outbox")
    assert record_late(store, list(waiting.unrecorded), logging.getLogger("t")) == []
    _render_every_route(client, _run_id(4), "after the result was recorded late")

    # A try in flight beside the finished runs, alone in its second (the fleet chart's
    # period when the runs span less than two minutes).
    time.sleep(1.1)
    _run(
        store, gpu, trace, 5, _in_flight(client, _run_id(5), "a later try in flight", replay, seen)
    )
    assert seen == ["first try in flight", "a later try in flight"]
    # The CLI reads the same store the same way.
    for command in (["report"], ["runs"], ["jobs"]):
        assert main([*command, "--db", store.engine.url.render_as_string(False)]) == 0
    capsys.readouterr()


def test_every_route_of_the_app_is_asked_for() -> None:
    """The case list above covers every route the app serves: a new route is added here."""
    served = {r.path for r in create_app().routes if isinstance(r, APIRoute)}
    templates = {_template(path) for path in _asked("r")}
    assert served <= templates, sorted(served - templates)


def _template(path: str) -> str:
    """The route template an asked path matches (its query dropped, names put back)."""
    bare = path.split("?")[0]
    return (
        bare.replace(quote(JOB), "{job_id:path}")
        .replace(f"/tasks/{TASK}", "/tasks/{task_id}")
        .replace(f"/dags/{DAG}", "/dags/{dag_id}")
    )


def test_the_fleet_page_during_a_run_fits_1280_px(
    airflow_db: Path,
    browser: Browser,
    trace: WorkloadTrace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fleet page while a try is in flight (issue 47), in headless Chromium at 1,280 px:
    its job reads as running, nothing scrolls sideways, the chart is the page's width. Its
    screenshot is ``artifacts/ui-fleet-inflight-1280.png`` (scripts/ui_screenshots.py)."""
    store = SQLStore(f"sqlite:///{tmp_path / 'zeus.db'}", create_schema=True)
    monkeypatch.setattr(queries, "store", lambda: store)
    client, gpu = _client(store), ReplayGPU(trace)
    replay = ReplayTraining(gpu, seed=3)
    for day in range(6):
        _run(store, gpu, trace, day, replay)
        time.sleep(0.6 if day % 2 else 0)  # runs in three seconds: the chart's periods
    seen: dict[str, Any] = {}

    def shot(run: TrainingRun) -> object:
        open_page(browser, client.get("/jobs").text, tmp_path / "fleet.html")
        seen.update(browser.evaluate(OVERFLOW))
        seen["chart"] = browser.evaluate(CHART_WIDTH)
        seen["text"] = browser.evaluate("document.body.innerText")
        browser.screenshot(artifact(tmp_path, "ui-fleet-inflight-1280.png"))
        return replay(run)

    _run(store, gpu, trace, 6, shot)
    store.engine.dispose()
    assert "running" in seen["text"] and JOB in seen["text"]
    assert [n for n, v in seen.items() if isinstance(v, list) and v[0] > v[1]] == []
    chart_px, page_px = seen["chart"]
    assert chart_px >= 0.9 * page_px, seen["chart"]  # the whole width, not half of it


CHART_WIDTH = """(() => {
  const chart = document.querySelector('figure.panel svg.chart');
  const main = chart.closest('.charts').parentElement;
  return [chart.getBoundingClientRect().width, main.getBoundingClientRect().width];
})()"""
"""The fleet chart's width against its container's (px)."""
