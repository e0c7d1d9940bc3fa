"""The Zeus app in this process, logged in as a reader of every DAG, for the pages' edge
cases: an empty store, a job that has not run, a store that cannot be read. (The login itself
and per-DAG access are tested against a real api-server in test_ui_server.py.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from fixtures_airflow import TRACES
from fixtures_store import StoreOutage, overwrite_trials
from fixtures_ui import app_client

from zeus_airflow.core.common.config import JobConfig
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
    return app_client(store, monkeypatch)


def test_an_empty_store_says_so(client: TestClient) -> None:
    page = client.get("/jobs")
    assert page.status_code == 200 and "No Zeus job yet" in page.text
    assert client.get("/api/jobs").json() == {"jobs": []}


def test_a_job_that_has_not_run_has_a_page(client: TestClient, store: SQLStore) -> None:
    store.register_job(JobConfig("quiet.train", (32, 64), 64, target_metric=0.9, max_epochs=5))
    page = client.get("/jobs/quiet.train")
    assert page.status_code == 200
    assert "No run yet" in page.text and "No estimate yet" in page.text
    assert page.text.count("<circle") == 0
    runs = client.get("/api/jobs/quiet.train/runs").json()
    assert (runs["total"], runs["pages"], runs["runs"]) == (0, 1, [])
    job = client.get("/api/jobs/quiet.train").json()["job"]
    assert (job["phase"], job["best_batch_size"], job["default_estimate"]) == (
        "pruning",
        None,
        None,
    )


def test_an_unknown_job_or_version_is_404_in_the_callers_format(
    client: TestClient, store: SQLStore
) -> None:
    store.register_job(JobConfig("quiet.train", (32, 64), 64, target_metric=0.9, max_epochs=5))
    api = client.get("/api/jobs/nope")
    assert api.status_code == 404 and "nope" in api.json()["detail"]
    page = client.get("/jobs/quiet.train?version=7")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "has no version 7: it has 1" in page.text


def test_a_store_that_cannot_be_read_is_503_naming_the_store(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable() -> SQLStore:
        raise StoreError(
            "the zeus-airflow store at postgresql+psycopg://zeus:***@db/zeus is unreachable"
        )

    monkeypatch.setattr(queries, "store", unreachable)
    api = client.get("/api/jobs")
    assert api.status_code == 503 and "db/zeus" in api.json()["detail"]
    page = client.get("/jobs")
    assert page.status_code == 503 and "The zeus-airflow store is unavailable" in page.text


def test_an_infeasible_job_is_explained_not_failed(client: TestClient, store: SQLStore) -> None:
    """Every size missed the target: the page says why each is out, that runs fall back, and
    which runs did; the API carries the same."""
    from fixtures_store import replay_never_reaching

    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.store.base import RecurrenceKey
    from zeus_airflow.core.train.engine import Engine

    gpu = ReplayGPU(load_workload_trace(resolve_traces_dir(), "v100", "cifar100"))
    # The paper's walk: with the budget, b0's miss would end each recurrence instead.
    config = JobConfig(
        "hard.train", (512, 1024), 1024, target_metric=0.99, max_epochs=3, exploration_budget=None
    )
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
    # The runs' Airflow tasks succeeded (a missed target is a warning): the status must not
    # read "failed" beside a green task, and it says what it means.
    statuses = re.findall(r'<td class="status-(\w+)" title="([^"]+)">([^<]+)', page.text)
    assert [(status, shown.strip()) for status, _, shown in statuses] == [
        ("failed", "target missed")
    ] * 3
    assert all("task still succeeded" in title for _, title, _ in statuses)


def test_the_summary_line_and_the_job_page_show_a_run_alike(
    client: TestClient, store: SQLStore
) -> None:
    """One run of 1.5 h: the summary line (Rendered Templates, task log) and the UI format it
    with the same units module, so both read the same text. Before they shared it, this run
    read "1.5 h" in the summary and "89.8 min" on the page."""
    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.store.base import RecurrenceKey
    from zeus_airflow.core.train.engine import Engine
    from zeus_airflow.core.train.replay_training import ReplayTraining
    from zeus_airflow.operators.summary import summary_line

    gpu = ReplayGPU(load_workload_trace(resolve_traces_dir(), "v100", "sentiment140"))
    config = JobConfig("units.train", (16,), 16, target_metric=0.5, max_epochs=100)
    result = Engine(store, gpu, config, seed=1, heartbeat_s=None).run_recurrence(
        ReplayTraining(gpu), RecurrenceKey("day0", "units", "train")
    )
    assert 3600 <= result.time_s < 7200  # between the two old switches to hours
    energy, duration = summary_line(result).split(" · ")[:2]
    page = client.get("/jobs/units.train").text
    assert (energy, duration) == ("785 kJ", "89.8 min")
    # The job's cards (one run: its totals) and the run's row in the runs table.
    assert f'<div class="value">{energy}</div>' in page
    assert f'<div class="value">{duration}</div>' in page
    assert f'<td class="num">{duration}</td>' in page


def test_a_job_with_carbon_figures_shows_them_per_run_and_against_default(
    client: TestClient, store: SQLStore
) -> None:
    """Three runs of b0 (so Default has an estimate): one on schedule at 400 gCO2e/kWh, one
    started 3 h later at 100 (400 had it not waited), one whose source fell back."""
    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.domain import RecurrenceKey, RunCarbon
    from zeus_airflow.core.train.engine import Engine
    from zeus_airflow.core.train.replay_training import ReplayTraining

    gpu = ReplayGPU(load_workload_trace(resolve_traces_dir(), "v100", "sentiment140"))
    config = JobConfig("green.train", (16,), 16, target_metric=0.5, max_epochs=100)
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
    results = [
        engine.run_recurrence(
            ReplayTraining(gpu, seed=1), RecurrenceKey(f"day{i}", "green", "train")
        )
        for i in range(3)
    ]
    kwh = [r.energy_j / 3.6e6 for r in results]
    figures = (
        RunCarbon("DE", kwh[0] * 400, None, 400.0, "live"),
        RunCarbon(
            "DE",
            kwh[1] * 100,
            None,
            100.0,
            "forecast",
            start_delay_s=3 * 3600.0,
            expected_emissions_g=kwh[1] * 90,
            unshifted_intensity_g_per_kwh=400.0,
            start_reason="the midday dip",
        ),
        RunCarbon("DE", kwh[2] * 475, None, 475.0, "fallback", "HTTP 401"),
    )
    for i, (result, run) in enumerate(zip(results, figures, strict=True)):
        store.record_carbon(result.job.id, RecurrenceKey(f"day{i}", "green", "train"), run)
    page = client.get("/jobs/green.train").text
    assert 'id="emissions"' in page and "3 runs · zone DE · 1 started later" in page
    assert page.count('class="badge provenance-') == 3
    assert '<span class="badge provenance-fallback">fallback</span>' in page
    assert 'title="the midday dip">3 h</td>' in page
    assert 'id="chart-emissions"' in page and "Cumulative emissions against Default" in page
    chart = page[page.index('id="chart-emissions"') :]
    chart = chart[: chart.index("</figure>")]
    assert "Default (estimate)" in chart and "started 3 h late" in chart
    runs = client.get("/api/jobs/green.train/runs").json()["runs"]
    by_run = {r["run"]["run_id"]: r["run"] for r in runs}
    assert by_run["day1"]["emissions_g"] == pytest.approx(kwh[1] * 100)
    assert (by_run["day1"]["start_delay_s"], by_run["day2"]["carbon_provenance"]) == (
        10800.0,
        "fallback",
    )

    from zeus_airflow.core import reports

    detail = queries.job_detail(DagAccess(all_dags=True, dag_ids=frozenset()), "green.train")
    default = reports.default_emissions_g(detail.summary.default, detail.runs)
    d = detail.summary.default
    assert d is not None
    # Run 2 is compared with Default on schedule (400), not with what it met after waiting.
    assert default[1] == pytest.approx(d.energy_j / 3.6e6 * 400)
    assert default[0] == pytest.approx(d.energy_j / 3.6e6 * 400)
    assert default[2] == pytest.approx(d.energy_j / 3.6e6 * 475)

    # Issue 37: what waiting saved, against starting at once, apart from Default: run 1's
    # energy at the 400 it would have met minus what it emitted at 100.
    from zeus_airflow.core.carbon.accounting import shift_savings
    from zeus_airflow.core.domain import energy_with_setup_j

    shift = shift_savings(detail.runs)
    unshifted = energy_with_setup_j(detail.runs[1]) / 3.6e6 * 400
    assert shift is not None and shift.unshifted_emissions_g == pytest.approx(unshifted)
    assert shift.saved_g == pytest.approx(unshifted - kwh[1] * 100)
    assert 'id="shift-saved"' in page and "saved against starting each carbon-aware" in page
    fleet = client.get("/jobs").text
    assert 'id="shift-saved"' in fleet and "Emissions saved by shifting starts" in fleet


def test_an_observe_mode_job_shows_what_the_optimum_would_have_saved(
    client: TestClient, store: SQLStore
) -> None:
    from fixtures_jobs import JOB_ID, MAX_W, observe_job

    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.common.units import show_energy, show_time

    results = observe_job(store, load_workload_trace(TRACES, "v100", "cifar100"), 2)
    saved_j = sum(r.figures.would_save_energy_j or 0.0 for r in results)
    optimum = results[-1].optimal_power_limit_w
    page = client.get(f"/jobs/{JOB_ID}")
    assert page.status_code == 200
    card = page.text.split('id="observe"', 1)[1].split("</div></div>", 1)[0]
    assert "Observe mode: the optimum would save" in card and show_energy(saved_j) in card
    # Under "would save", a bare "time +37 s" read as 37 s saved when it meant 37 s longer.
    saved_s = sum(r.figures.would_save_time_s or 0.0 for r in results)
    assert (
        f"taking {show_time(-saved_s)} longer"
        if saved_s < 0
        else f"finishing {show_time(saved_s)} sooner"
    ) in card
    assert "time +" not in card and "time −" not in card
    assert f'{MAX_W} W <span class="muted"' in page.text  # the limit trained at, then...
    assert f"(optimum {optimum} W)" in page.text
    job = client.get(f"/api/jobs/{JOB_ID}").json()
    assert job["job"]["would_save_energy_j"] == pytest.approx(saved_j)
    assert [r["optimal_power_limit_w"] for r in job["runs"]] == [optimum, optimum]


def test_the_runs_table_shows_cpu_and_dram_beside_the_gpus(
    client: TestClient, store: SQLStore, tmp_path: Path
) -> None:
    from fixtures_jobs import run_job

    result, _ = run_job(tmp_path)  # the same store file as the app's
    page = client.get("/jobs/host")
    assert page.status_code == 200
    assert "CPU+DRAM (J)" in page.text
    assert ">180</td>" in page.text and "CPU 150.0 J, DRAM 30.0 J" in page.text
    (run,) = client.get("/api/jobs/host/runs").json()["runs"]
    assert (run["run"]["cpu_energy_j"], run["run"]["dram_energy_j"]) == (
        pytest.approx(result.figures.cpu_energy_j),
        pytest.approx(result.figures.dram_energy_j),
    )


def test_a_limit_set_through_zeusd_says_so_in_the_runs_table(
    client: TestClient, store: SQLStore, tmp_path: Path
) -> None:
    from fixtures_jobs import run_job

    run_job(tmp_path)  # real GPUs (the fake NVML) in measure mode: no limit changed
    (run,) = client.get("/api/jobs/host/runs").json()["runs"]
    assert run["run"]["power_control"] == "none"
    assert "via zeusd" not in client.get("/jobs/host").text
    overwrite_trials(store, None, power_control="zeusd")
    assert "via zeusd</span>" in client.get("/jobs/host").text


# --- a store that goes down, ids no job can have --------------------------------------------
@pytest.fixture
def pg_client(
    airflow_db: Path, store_outage: StoreOutage, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, StoreOutage]]:
    """The app on a PostgreSQL store behind a TCP proxy that ``cut()`` takes down."""
    from zeus_airflow.plugins.app import create_app
    from zeus_airflow.plugins.auth import dag_access

    store = SQLStore(store_outage.url, timeout_s=2)
    store.register_job(JobConfig("pg.train", (32, 64), 64, target_metric=0.9, max_epochs=5))
    app = create_app()
    app.dependency_overrides[dag_access] = lambda: DagAccess(all_dags=True, dag_ids=frozenset())
    monkeypatch.setattr(queries, "store", lambda: store)
    yield TestClient(app, root_path="/zeus", raise_server_exceptions=False), store_outage
    store.engine.dispose()


ON_POSTGRESQL = pytest.mark.parametrize("db_backend", ["postgresql"], indirect=True)
ROUTES = ["/jobs", "/jobs/pg.train", "/api/jobs", "/api/jobs/pg.train", "/api/jobs/pg.train/runs"]


@ON_POSTGRESQL
def test_a_store_that_goes_down_after_it_was_opened_is_503_on_every_route(
    pg_client: tuple[TestClient, StoreOutage],
) -> None:
    client, outage = pg_client
    assert [client.get(path).status_code for path in ROUTES] == [200] * len(ROUTES)
    outage.cut()
    for path in ROUTES:
        answer = client.get(path)
        assert answer.status_code == 503, (path, answer.text[:300])
        if path.startswith("/api/"):
            detail = answer.json()["detail"]
        else:
            assert answer.headers["content-type"].startswith("text/html")
            assert "The zeus-airflow store is unavailable" in answer.text
            detail = answer.text
        assert "the zeus-airflow store cannot be read" in detail
        assert "SELECT" not in detail and "[SQL" not in detail  # readable, no statement
    outage.restore()
    assert client.get("/api/jobs").status_code == 200  # the next request reads again


MALFORMED_IDS = ["a%00b", "%00", "j" * 251]


@ON_POSTGRESQL
@pytest.mark.parametrize("job_id", MALFORMED_IDS, ids=["nul", "only-nul", "too-long"])
@pytest.mark.parametrize("route", ["/jobs/{}", "/api/jobs/{}", "/api/jobs/{}/runs"])
def test_an_id_no_job_can_have_is_404_not_500(
    pg_client: tuple[TestClient, StoreOutage], job_id: str, route: str
) -> None:
    client, _ = pg_client
    answer = client.get(route.format(job_id))
    assert answer.status_code == 404, answer.text[:300]
    assert "no job has such an id" in answer.text


def test_the_fleet_page_pages_its_rows_and_totals_them_all(
    client: TestClient, store: SQLStore
) -> None:
    from zeus_airflow.plugins.fleet_page import PER_PAGE

    for i in range(PER_PAGE + 1):
        store.register_job(
            JobConfig(f"many_{i:03d}.train", (32, 64), 64, target_metric=0.9, max_epochs=5)
        )
    first, second = client.get("/jobs").text, client.get("/jobs?page=2").text
    rows = r'<tr>\s*<td><a href="/zeus/jobs/'
    assert len(re.findall(rows, first)) == PER_PAGE and len(re.findall(rows, second)) == 1
    assert f"{PER_PAGE + 1} jobs · page 1 of 2" in first and "many_100.train" in second
    assert re.search(r'<div class="label">Jobs</div><div class="value">101</div>', second)


def test_a_result_recorded_late_is_shown_as_such(client: TestClient, store: SQLStore) -> None:
    """The store failed at the end of training (its write lock held elsewhere); the next run
    recorded the result from the outbox: the job page and the API say it came late."""
    import logging

    from fixtures_store import FAST_RETRY, SQLiteWriteLock, job_config

    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.domain import RecurrenceKey
    from zeus_airflow.core.train.engine import Engine, record_late
    from zeus_airflow.core.train.replay_training import ReplayTraining

    trace = load_workload_trace(TRACES, "v100", "cifar100")
    quick = SQLStore(store.engine.url, retry=FAST_RETRY, timeout_s=0.2)
    lock = SQLiteWriteLock(str(store.engine.url.database))
    gpu = ReplayGPU(trace)
    replay = ReplayTraining(gpu, seed=1)

    def train(run: object) -> object:
        value = replay(run)  # type: ignore[arg-type]
        lock.cut()
        return value

    config = job_config(trace, job_id="late.train")
    result = Engine(quick, gpu, config, seed=1, heartbeat_s=None).run_recurrence(
        train, RecurrenceKey("r1", dag_id="late", task_id="train")
    )
    lock.restore()
    lock.close()
    assert record_late(store, list(result.unrecorded), logging.getLogger("t")) == []
    quick.engine.dispose()

    (shown,) = client.get("/api/jobs/late.train/runs").json()["runs"]
    assert shown["run"]["recorded_late_at"] is not None
    assert shown["run"]["status"] == "succeeded"
    page = client.get("/jobs/late.train")
    assert page.status_code == 200 and ">recorded late</span>" in page.text


def test_the_pages_read_a_store_of_extreme_figures_as_missing(
    client: TestClient, store: SQLStore
) -> None:
    """NULL, NaN, 1e308 or negative figures from before issue 35's checks: every page and
    API answer renders (no OverflowError drawing a chart's axis, no 500)."""
    from fixtures_jobs import store_of_extremes
    from fixtures_store import STORE_TRACES

    from zeus_airflow.core.common.traces import load_workload_trace

    trace = load_workload_trace(STORE_TRACES, "v100", "cifar100")
    jobs = store_of_extremes(store, trace, budgets=(0.1,))
    paths = ["/jobs", "/api/jobs", "/api/report"] + [
        path for job_id in jobs for path in (f"/jobs/{job_id}", f"/api/jobs/{job_id}")
    ]
    answers = {path: client.get(path) for path in paths}
    assert {path: r.status_code for path, r in answers.items()} == dict.fromkeys(paths, 200)
    huge = answers["/api/jobs/huge-0.1"].json()["job"]
    assert huge["energy_j"] is None or huge["energy_j"] < 1e15  # the garbage is not summed
