"""Every figure agrees wherever it appears: the fleet page, the job page, ``zeus-airflow runs``,
``zeus-airflow report`` and the XComs, rendered for one store of mapped, carbon-aware and short
jobs (``fixtures_fleet``), compared job by job.

The figures: the job's phase (``domain.phases.shown_job_phase``, recorded after each try),
whether it falls back, the saving against Default, the exploration budget left, each run's
start delay and the emissions its carbon-aware start saved by shifting.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from fixtures_fleet import CARBON_JOB, MAPPED_JOBS, SHORT_JOB, Published, fill_fleet
from fixtures_ui import app_client

from zeus_airflow.cli import main
from zeus_airflow.core.common.units import (
    show_emissions,
    show_saved_interval,
    show_saved_share,
)
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.operators.summary import carbon_xcom_values, xcom_values

JOBS = (*MAPPED_JOBS, CARBON_JOB, SHORT_JOB)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Published]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('agree') / 'fleet.db'}"
    yield url, fill_fleet(url)


@pytest.fixture
def client(
    airflow_db: Path, filled: tuple[str, Published], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    store = SQLStore(filled[0])
    yield app_client(store, monkeypatch)
    store.engine.dispose()


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _text(cell: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


def _fleet_rows(page: str) -> dict[str, list[str]]:
    """The fleet page's rows by job id, as their cells' text."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        cells = [_text(c) for c in CELL.findall(row)]
        if cells and cells[0] in JOBS:
            rows[cells[0]] = cells
    return rows


def _card(page: str, card_id: str) -> str:
    """A job page card's value, as its text."""
    found = re.search(rf'id="{card_id}">.*?class="value[^"]*">(.*?)</div>', page, re.S)
    assert found, card_id
    return _text(found.group(1))


def _xcoms(published: Published, job_id: str) -> list[dict[str, Any]]:
    """What the operator pushed for each run of the job, oldest first."""
    return [
        {**xcom_values(result), **(carbon_xcom_values(carbon) if carbon else {})}
        for result, carbon in published[job_id]
    ]


def test_phase_savings_budget_and_start_delay_agree_on_every_surface(
    client: TestClient, filled: tuple[str, Published], capsys: pytest.CaptureFixture[str]
) -> None:
    url, published = filled
    reported_fleet = _cli_json(capsys, "report", "--db", url)
    report = {j["job_id"]: j for j in reported_fleet["jobs"]}
    tries = _cli_json(capsys, "runs", "--db", url)
    fleet_page = client.get("/jobs").text
    fleet = _fleet_rows(fleet_page)
    totals = reported_fleet["fleet"]
    # The Jobs card counts the jobs the report counts as still pruning and falling back.
    assert (
        f"{totals['learning_jobs']} pruning · {totals['falling_back_jobs']} falling back"
        in html.unescape(fleet_page)
    )
    assert totals["learning_jobs"] == sum(j["phase"] == "pruning" for j in report.values())
    header = ["Job", "DAG / task", "Figures", "Runs", "Phase", "Last run", "Budget left"]
    phases_seen: set[str] = set()
    budgets_seen: list[float | None] = []
    for job_id in JOBS:
        reported, row = report[job_id], dict(zip(header, fleet[job_id], strict=False))
        xcoms = _xcoms(published, job_id)
        own = [t for t in tries if t["job_id"] == job_id]
        page = client.get(f"/jobs/{quote(job_id)}").text
        api = client.get(f"/api/jobs/{quote(job_id)}").json()

        # The phase: recorded after the latest try, shown by each surface.
        phase = reported["phase"]
        phases_seen.add(phase)
        assert phase in ("pruning", "sampling", "infeasible"), (job_id, phase)
        assert row["Phase"].split()[0] == phase, (job_id, row)
        assert _card(page, "phase") == phase
        assert api["job"]["phase"] == phase
        assert own[-1]["job_phase"] == phase
        assert xcoms[-1]["job_phase"] == phase
        assert ("fallback" in row["Phase"]) == reported["fallback"]

        # The exploration budget left after the latest run.
        left = reported["budget_left_runs"]
        assert own[-1]["budget_left_runs"] == pytest.approx(left)
        assert xcoms[-1]["budget_left_runs"] == pytest.approx(left)
        if left is None:  # no estimate of Default's cost yet: no budget to show
            assert row["Budget left"] == "—"
            budgets_seen.append(None)
        else:
            assert row["Budget left"] == f"{left:.1f} runs"
            assert f"budget {left:.1f} runs" in page or f"({left:.1f} Default runs" in page
            budgets_seen.append(left)

        # The saving against Default: one estimate, one fraction.
        saved = reported["saved_energy_fraction"]
        if saved is None:
            assert "no estimate yet" in row.get("Energy", "") + fleet[job_id][8]
        else:
            # With its 95 % interval from the runs' own spread, the same on both pages.
            shown = show_saved_interval(saved, reported["saved_energy_margin"], say_noise=False)
            assert f"({shown}" in fleet[job_id][8], (job_id, fleet[job_id])
            assert shown in _text(page[page.index('id="saved"') :][:600])
            assert api["job"]["energy_j"] == pytest.approx(reported["energy_j"])

        # Each run's start delay: the XCom, the store's runs, the job page's data.
        runs_api = client.get(f"/api/jobs/{quote(job_id)}/runs?per_page=50").json()["runs"]
        delays_api = [r["run"]["start_delay_s"] for r in reversed(runs_api)]
        delays_xcom = [x.get("start_delay_s") for x in xcoms]
        last_tries = {(t["dag_id"], t["run_id"], t["map_index"]): t for t in own}
        delays_runs = [t["start_delay_s"] for t in last_tries.values()]
        assert delays_api == delays_xcom == delays_runs, job_id
    assert any(b is not None for b in budgets_seen)


def test_time_shift_savings_agree_between_the_report_and_the_job_page(
    client: TestClient, filled: tuple[str, Published], capsys: pytest.CaptureFixture[str]
) -> None:
    url, published = filled
    reported = _cli_json(capsys, "report", "--db", url, "--job", CARBON_JOB)["jobs"][0]
    delayed = [c for _, c in published[CARBON_JOB] if c and c.start_delay_s]
    assert delayed and all(c.start_delay_s > 0 for c in delayed)
    assert reported["shift_saved_emissions_g"] > 0
    page = client.get(f"/jobs/{quote(CARBON_JOB)}").text
    assert _card(page, "shift-saved") == show_saved_share(
        reported["shift_saved_emissions_fraction"]
    )
    assert main(["report", "--db", url, "--job", CARBON_JOB]) == 0
    shown = show_saved_share(reported["shift_saved_emissions_fraction"])
    assert (
        f"shifting starts saved {show_emissions(reported['shift_saved_emissions_g'])} ({shown}"
        in (capsys.readouterr().out)
    )


def test_every_saving_and_every_published_record_compares_with_one_default(
    client: TestClient, filled: tuple[str, Published], capsys: pytest.CaptureFixture[str]
) -> None:
    """One Default estimate per job (``reports.default``): the report's energy, time and
    cost against Default are that estimate times the finished runs; its cost is the job's
    cost formula on its energy and time (issue 47: the short job's Default said 379 J and
    2.04 s but cost 260.9, where the formula gives 445); each run's published record
    (OpenLineage's facet, MLflow's metrics, an Asset event's extra: one record) saves against
    the same estimate, and the runs' savings add up to the report's (issue 47: MLflow's
    ``saved_energy_j`` 167.7 where the report said 0 %)."""
    from zeus_airflow.core.common.cost import zeus_cost
    from zeus_airflow.core.domain import RecurrenceKey
    from zeus_airflow.integrations.mlflow import PREFIX, split
    from zeus_airflow.integrations.openlineage import FACET_NAME, run_facets
    from zeus_airflow.integrations.published import record, stored_record

    url, published = filled
    reported = {j["job_id"]: j for j in _cli_json(capsys, "report", "--db", url)["jobs"]}
    store = SQLStore(url)
    compared = 0
    for job_id in JOBS:
        job = reported[job_id]
        estimate = client.get(f"/api/jobs/{quote(job_id)}").json()["job"]["default_estimate"]
        n = job["finished_runs"]
        assert estimate is not None and n > 0, job_id
        # The report's Default figures: the estimate per run, times the finished runs.
        for figure in ("energy_j", "time_s", "cost"):
            assert job[f"default_{figure}"] == pytest.approx(estimate[figure] * n), figure
        # Its cost: the job's formula on its energy and time (V100: 250 W; eta 0.5).
        (result, _), *_ = published[job_id]
        config = result.job.config
        assert estimate["cost"] == pytest.approx(
            zeus_cost(estimate["energy_j"], estimate["time_s"], config.eta, 250.0)
        )
        # Each run's record, as the store holds it now: the same Default.
        saved = {"saved_energy_j": 0.0, "saved_time_s": 0.0, "saved_cost": 0.0}
        shown = client.get(f"/api/jobs/{quote(job_id)}/runs?per_page=50").json()["runs"]
        assert len(shown) == len(published[job_id])
        for run in (r["run"] for r in shown):
            key = RecurrenceKey(
                run["run_id"], run["dag_id"], run["task_id"], run["map_index"], run["try_number"]
            )
            values = stored_record(store, job_id, key)
            assert values is not None
            for name, total in saved.items():
                figure = name.removeprefix("saved_")
                assert values[name] == pytest.approx(estimate[figure] - values[figure])
                saved[name] = total + values[name]
        assert saved["saved_energy_j"] == pytest.approx(job["default_energy_j"] - job["energy_j"])
        assert saved["saved_time_s"] == pytest.approx(job["default_time_s"] - job["time_s"])
        assert saved["saved_cost"] == pytest.approx(job["default_cost"] - job["cost"])
        # The latest run's record as the operator publishes it: the facet, MLflow, the Asset.
        result, carbon = published[job_id][-1]
        values = record(result, carbon, None, store)
        assert values["saved_energy_j"] == pytest.approx(estimate["energy_j"] - result.energy_j)
        assert values["saved_cost"] == pytest.approx(estimate["cost"] - result.cost)
        facet = run_facets(values).run_facets[FACET_NAME]
        metrics, _, _ = split(values)
        for name in saved:
            assert getattr(facet, name) == metrics[PREFIX + name] == values[name]
        compared += 1
    store.engine.dispose()
    assert compared == len(JOBS)
