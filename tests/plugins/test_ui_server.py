"""The Zeus UI in a real ``airflow api-server``, over a store filled by real DAG runs.

Users: ``admin`` and ``viewer`` read every DAG; ``alpha`` reads the alpha DAG only (see
``fixtures_ui.DagScopedAuthManager``).
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import httpx
import pytest
from fastapi.routing import APIRoute
from fixtures_airflow import xcoms
from fixtures_store import stored_trials
from fixtures_ui import (
    ALPHA_DAG,
    ALPHA_JOB,
    ALPHA_RUNS,
    BETA_DAG,
    BETA_JOB,
    CLI_JOB,
    MAPPED_DAG,
    MAPPED_JOBS,
    MAPPED_RUNS,
    USERS,
    ApiServer,
    UIData,
)


@pytest.fixture(scope="module")
def tokens(api_server: ApiServer) -> dict[str, str]:
    return {user: api_server.token(user) for user in USERS}


def get(
    server: ApiServer, path: str, token: str | None = None, cookie: bool = False, **params: Any
) -> httpx.Response:
    """GET without following redirects; the token as a Bearer header or as the UI's cookie."""
    headers = {"Authorization": f"Bearer {token}"} if token and not cookie else {}
    cookies = {"_token": token} if token and cookie else {}
    return httpx.get(
        server.url + path,
        headers=headers,
        cookies=cookies,
        params=params or None,
        follow_redirects=False,
        timeout=60,
    )


def concrete(path: str) -> str:
    """A route's path with its parameters filled in."""
    values = {"job_id": ALPHA_JOB, "dag_id": ALPHA_DAG, "task_id": "train"}
    return "/zeus" + re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values[m.group(1)], path)


def zeus_routes() -> list[str]:
    from zeus_airflow.plugins.app import create_app

    routes = [r for r in create_app().routes if isinstance(r, APIRoute)]
    assert all(r.methods == {"GET"} for r in routes)
    return sorted(concrete(r.path) for r in routes)


def test_the_plugin_is_registered_once_with_its_views(
    api_server: ApiServer, tokens: dict[str, str]
) -> None:
    plugins = get(api_server, "/api/v2/plugins", tokens["admin"]).json()["plugins"]
    ours = [p for p in plugins if p["name"] == "zeus_airflow"]
    assert len(ours) == 1
    assert [a["url_prefix"] for a in ours[0]["fastapi_apps"]] == ["/zeus"]
    assert {v["destination"] for v in ours[0]["external_views"]} == {
        "nav",
        "dag",
        "task",
        "task_instance",
    }
    assert "already registered" not in api_server.log_text()
    providers = get(api_server, "/api/v2/providers", tokens["admin"]).json()["providers"]
    assert "zeus-airflow" in {p["package_name"] for p in providers}


def test_the_api_server_listens_on_loopback_only(api_server: ApiServer) -> None:
    import psutil

    group = [p for p in psutil.process_iter() if _in_group(p, api_server.process.pid)]
    listening = {
        (c.laddr.ip, c.laddr.port)
        for p in group
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("127.0.0.1", int(urlsplit(api_server.url).port or 0))}


def _in_group(process: Any, group_id: int) -> bool:
    try:
        return bool(os.getpgid(process.pid) == group_id)
    except ProcessLookupError:
        return False


def test_every_page_and_endpoint_needs_a_login(api_server: ApiServer) -> None:
    paths = zeus_routes()
    assert len(paths) >= 9
    for path in paths:
        anonymous = get(api_server, path)
        if "/api/" in path or path.endswith("/openapi.json"):
            assert anonymous.status_code == 401, path
        else:
            assert anonymous.status_code == 307, path
            login = urlsplit(anonymous.headers["location"])
            assert login.path == "/auth/login", path
            assert urlsplit(parse_qs(login.query)["next"][0]).path == path
        forged = get(api_server, path, "not.a.token")
        assert forged.status_code in (401, 403, 307), path


def test_the_login_pages_next_is_the_path_whatever_the_host_header_says(
    api_server: ApiServer,
) -> None:
    path = f"/zeus/jobs/{ALPHA_JOB}"
    for host in ("evil.example", "evil.example:443", "127.0.0.1@evil.example"):
        anonymous = httpx.get(
            api_server.url + path + "?page=2",
            headers={"Host": host},
            follow_redirects=False,
            timeout=60,
        )
        assert anonymous.status_code == 307
        back = parse_qs(urlsplit(anonymous.headers["location"]).query)["next"][0]
        assert back == f"{path}?page=2" and "evil" not in back, host


def test_an_id_no_job_or_task_can_have_is_404(
    api_server: ApiServer, tokens: dict[str, str]
) -> None:
    for path, params in (
        (f"/zeus/jobs/{quote(chr(0))}", {}),
        ("/zeus/api/jobs/a%00b/runs", {}),
        (f"/zeus/dags/{ALPHA_DAG}/tasks/train", {"run_id": chr(0)}),
    ):
        answer = get(api_server, path, tokens["admin"], **params)
        assert answer.status_code == 404, (path, answer.text[:300])


def test_a_reader_of_every_dag_sees_every_job(
    api_server: ApiServer, tokens: dict[str, str], ui_data: UIData
) -> None:
    listed = {
        j["job_id"]: j for j in get(api_server, "/zeus/api/jobs", tokens["viewer"]).json()["jobs"]
    }
    assert set(listed) == {ALPHA_JOB, BETA_JOB, CLI_JOB, *MAPPED_JOBS}
    assert listed[CLI_JOB]["tasks"] == [{"dag_id": "", "task_id": ""}]
    alpha, beta = listed[ALPHA_JOB], listed[BETA_JOB]
    assert alpha["tasks"] == [{"dag_id": ALPHA_DAG, "task_id": "train"}]
    assert beta["tasks"] == [{"dag_id": BETA_DAG, "task_id": "fit"}]
    assert (alpha["runs"], alpha["measurements"], alpha["url"]) == (
        ALPHA_RUNS,
        ["replayed"],
        f"/zeus/jobs/{ALPHA_JOB}",
    )
    stored = sum(t.energy_j or 0.0 for t in stored_trials(ui_data.store_url, ALPHA_JOB))
    assert alpha["energy_j"] == pytest.approx(stored)
    assert alpha["energy_kwh"] == pytest.approx(stored / 3.6e6)
    assert alpha["default_estimate"]["batch_size"] == alpha["default_batch_size"]
    assert alpha["energy_saved_j"] == pytest.approx(alpha["default_energy_j"] - stored)


def test_a_user_of_one_dag_never_sees_the_other_dags_job(
    api_server: ApiServer, tokens: dict[str, str]
) -> None:
    alpha = tokens["alpha"]
    # Airflow's own API agrees on the scope
    assert get(api_server, f"/api/v2/dags/{ALPHA_DAG}", alpha).status_code == 200
    assert get(api_server, f"/api/v2/dags/{BETA_DAG}", alpha).status_code == 403
    listed = get(api_server, "/zeus/api/jobs", alpha).json()["jobs"]
    assert [j["job_id"] for j in listed] == [ALPHA_JOB]
    assert get(api_server, "/zeus/api/jobs", alpha, dag_id=BETA_DAG).json() == {"jobs": []}
    for path in (
        f"/zeus/api/jobs/{BETA_JOB}",
        f"/zeus/api/jobs/{BETA_JOB}/runs",
        f"/zeus/jobs/{BETA_JOB}",
        f"/zeus/api/jobs/{CLI_JOB}",
    ):
        hidden = get(api_server, path, alpha)
        assert hidden.status_code == 404, path
        assert get(api_server, path, tokens["viewer"]).status_code == 200, path
    assert get(api_server, f"/zeus/dags/{BETA_DAG}", alpha).status_code == 403
    assert get(api_server, f"/zeus/dags/{BETA_DAG}/tasks/fit", alpha).status_code == 403
    page = get(api_server, "/zeus/jobs", alpha, cookie=True)
    assert page.status_code == 200 and ALPHA_JOB in page.text and BETA_JOB not in page.text


def test_the_job_page_draws_its_charts_and_marks_replayed_figures(
    api_server: ApiServer, tokens: dict[str, str]
) -> None:
    page = get(api_server, f"/zeus/jobs/{ALPHA_JOB}", tokens["viewer"], cookie=True)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    charts = dict(
        re.findall(r'<figure class="panel" id="chart-([\w-]+)">(.*?)</figure>', html, re.S)
    )
    assert {
        "energy",
        "time",
        "batch-size",
        "cumulative",
        "arms",
        "profile-power",
        "profile-throughput",
    } <= set(charts)
    solid = re.findall(r'<circle class="dot (?!hollow)', charts["batch-size"])
    assert len(solid) == ALPHA_RUNS  # one per run; hollow ones are earlier failed tries
    assert charts["energy"].count("<circle") == ALPHA_RUNS
    assert charts["cumulative"].count('<path class="line') == 2  # Zeus and the Default line
    assert "How the Default estimate is made" in html and "kWh" in html
    rows = re.findall(r'<tr id="run-\d+".*?</tr>', html, re.S)
    assert len(rows) == ALPHA_RUNS
    assert all('<span class="badge measurement-replayed">replayed</span>' in row for row in rows)
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing from elsewhere
    assert "<script src" not in html and "<link" not in html  # styles and script inline


def test_runs_come_newest_first_a_page_at_a_time_with_airflow_dates(
    api_server: ApiServer, tokens: dict[str, str], ui_data: UIData
) -> None:
    path = f"/zeus/api/jobs/{ALPHA_JOB}/runs"
    first = get(api_server, path, tokens["viewer"], per_page=2).json()
    assert (first["total"], first["pages"], len(first["runs"])) == (ALPHA_RUNS, 3, 2)
    newest, oldest = ui_data.alpha_runs[-1], ui_data.alpha_runs[0]
    top = first["runs"][0]
    assert top["run"]["run_id"] == newest.run_id
    assert top["logical_date"].startswith(newest.logical_date.strftime("%Y-%m-%dT%H:%M"))
    assert top["dag_run_url"] == f"/dags/{ALPHA_DAG}/runs/{quote(newest.run_id, safe='')}"
    assert top["energy_kwh"] == pytest.approx(top["run"]["energy_j"] / 3.6e6)
    last = get(api_server, path, tokens["viewer"], per_page=2, page=3).json()
    assert [r["run"]["run_id"] for r in last["runs"]] == [oldest.run_id]


def test_the_dag_and_task_tabs_open_the_right_job(
    api_server: ApiServer, tokens: dict[str, str], ui_data: UIData
) -> None:
    viewer = tokens["viewer"]
    dag_tab = get(api_server, f"/zeus/dags/{ALPHA_DAG}", viewer)
    assert (dag_tab.status_code, dag_tab.headers["location"]) == (307, f"/zeus/jobs/{ALPHA_JOB}")
    run_id = ui_data.beta_runs[0].run_id
    ti_tab = get(api_server, f"/zeus/dags/{BETA_DAG}/tasks/fit", viewer, run_id=run_id)
    assert ti_tab.status_code == 307
    target = urlsplit(ti_tab.headers["location"])
    assert target.path == f"/zeus/jobs/{BETA_JOB}"
    assert parse_qs(target.query) == {"run_id": [run_id]}
    page = get(api_server, f"{target.path}?{target.query}", viewer, cookie=True)
    highlighted = re.findall(r'<tr id="run-\d+" class="highlight">.*?</tr>', page.text, re.S)
    assert len(highlighted) == 1 and run_id in highlighted[0]
    assert get(api_server, f"/zeus/dags/{ALPHA_DAG}/tasks/nope", viewer).status_code == 404


def test_a_mapped_instance_tab_opens_that_instances_job_and_runs(
    api_server: ApiServer, tokens: dict[str, str], ui_data: UIData
) -> None:
    viewer, run_id = tokens["viewer"], ui_data.mapped_runs[0].run_id
    # the href Airflow fills in on a mapped instance's page (plugin.VIEWS); instance 0, not
    # the run's latest trial (instance 1's)
    ti_tab = get(
        api_server, f"/zeus/dags/{MAPPED_DAG}/tasks/train", viewer, run_id=run_id, map_index="0"
    )
    assert ti_tab.status_code == 307
    target = urlsplit(ti_tab.headers["location"])
    assert target.path == f"/zeus/jobs/{quote(MAPPED_JOBS[0], safe='')}"
    assert parse_qs(target.query) == {"run_id": [run_id], "map_index": ["0"]}
    page = get(api_server, f"{target.path}?{target.query}", viewer, cookie=True)
    rows = re.findall(r'<tr id="run-\d+".*?</tr>', page.text, re.S)
    assert len(rows) == MAPPED_RUNS and all("[0]</span>" in row for row in rows)
    highlighted = [row for row in rows if 'class="highlight"' in row]
    assert len(highlighted) == 1 and run_id in highlighted[0]
    runs = get(api_server, f"/zeus/api/jobs/{quote(MAPPED_JOBS[0], safe='')}/runs", viewer).json()[
        "runs"
    ]
    assert {r["run"]["map_index"] for r in runs} == {0}
    # On an instance that is not mapped, Airflow leaves {MAP_INDEX} as it is.
    plain = get(
        api_server,
        f"/zeus/dags/{ALPHA_DAG}/tasks/train",
        viewer,
        run_id=ui_data.alpha_runs[0].run_id,
        map_index="{MAP_INDEX}",
    )
    assert urlsplit(plain.headers["location"]).path == f"/zeus/jobs/{ALPHA_JOB}"


def test_a_mapped_tasks_tab_lists_its_instances_jobs(
    api_server: ApiServer, tokens: dict[str, str]
) -> None:
    task_tab = get(
        api_server, f"/zeus/dags/{MAPPED_DAG}/tasks/train", tokens["viewer"], cookie=True
    )
    assert task_tab.status_code == 200
    listed = re.findall(r'<a href="/zeus/jobs/([^"]+)">', task_tab.text)
    assert listed == [quote(j, safe="") for j in MAPPED_JOBS]
    assert f"Zeus jobs of {MAPPED_DAG} / train" in task_tab.text
    # an unmapped task's tab still opens its one job
    alpha = get(api_server, f"/zeus/dags/{ALPHA_DAG}/tasks/train", tokens["viewer"])
    assert alpha.headers["location"] == f"/zeus/jobs/{ALPHA_JOB}"


def test_the_operators_link_opens_the_job_page(
    api_server: ApiServer, tokens: dict[str, str], ui_data: UIData
) -> None:
    link = xcoms(ALPHA_DAG, ui_data.alpha_runs[0].run_id, "train")["_link_ZeusJobLink"]
    page = get(api_server, link, tokens["viewer"], cookie=True)
    assert page.status_code == 200 and f"<h1>{ALPHA_JOB} " in page.text


def test_the_json_api_is_documented(api_server: ApiServer, tokens: dict[str, str]) -> None:
    spec = get(api_server, "/zeus/openapi.json", tokens["viewer"]).json()
    assert spec["servers"] == [{"url": "/zeus"}]
    assert set(spec["paths"]) == {
        "/api/jobs",
        "/api/jobs/{job_id}/runs",
        "/api/jobs/{job_id}",
        "/api/report",
    }
    for path, methods in spec["paths"].items():
        op = methods["get"]
        assert op["summary"] and op["description"], path
        assert "$ref" in op["responses"]["200"]["content"]["application/json"]["schema"], path
        assert {"401", "403", "404"} <= set(op["responses"]), path
    record = spec["components"]["schemas"]["RunRecord"]["properties"]
    assert "replayed" in record["measurement"]["description"]
    assert record["measurement"]["enum"] == ["measured", "replayed", "simulated"]
    assert "J-equivalents" in record["cost"]["description"]  # inherited, documented too
    report = spec["components"]["schemas"]["JobReport"]["properties"]
    assert "not a measurement" in report["measurement"]["description"]
    docs = get(api_server, "/zeus/docs", tokens["viewer"], cookie=True)
    assert docs.status_code == 200
    assert all(f"GET /zeus{p}" in docs.text for p in spec["paths"])


def test_the_report_reads_as_the_cli_writes_it_and_keeps_to_the_user_s_dags(
    api_server: ApiServer,
    tokens: dict[str, str],
    ui_data: UIData,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from zeus_airflow.cli import main

    served = get(api_server, "/zeus/api/report", tokens["viewer"]).json()
    assert main(["report", "--db", ui_data.store_url, "--format", "json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert [_moments(j) for j in served["jobs"]] == [_moments(j) for j in written["jobs"]]
    assert served["fleet"] == written["fleet"]
    jobs = {j["job_id"]: j for j in served["jobs"]}
    assert set(jobs) == {ALPHA_JOB, BETA_JOB, CLI_JOB, *MAPPED_JOBS}
    alpha = jobs[ALPHA_JOB]
    assert (alpha["runs"], alpha["dags"], alpha["measurement"]) == (
        ALPHA_RUNS,
        [ALPHA_DAG],
        "replayed",
    )
    assert served["fleet"]["runs"] == sum(j["runs"] for j in jobs.values())
    scoped = get(api_server, "/zeus/api/report", tokens["alpha"]).json()
    assert [j["job_id"] for j in scoped["jobs"]] == [ALPHA_JOB]
    assert scoped["jobs"][0] == alpha
    assert scoped["fleet"]["energy_j"] == pytest.approx(alpha["energy_j"])
    later = get(api_server, "/zeus/api/report", tokens["alpha"], since="2999-01-01").json()
    assert (later["jobs"][0]["runs"], later["jobs"][0]["energy_j"]) == (0, 0.0)


def _moments(job: dict[str, Any]) -> dict[str, Any]:
    """A report's job with its date parsed: ``Z`` and ``+00:00`` say the same."""
    from datetime import datetime

    return {**job, "last_run_at": datetime.fromisoformat(job["last_run_at"])}


def test_the_fleet_page_totals_filters_and_sorts_the_jobs_a_user_may_read(
    api_server: ApiServer, tokens: dict[str, str]
) -> None:
    viewer, alpha = tokens["viewer"], tokens["alpha"]
    report = get(api_server, "/zeus/api/report", viewer).json()
    page = get(api_server, "/zeus/", viewer, cookie=True).text
    assert "<h1>Zeus fleet</h1>" in page and 'id="chart-fleet-cumulative"' in page
    listed = re.findall(r'<a href="/zeus/jobs/([^"]+)">', page)
    assert sorted(listed) == sorted(quote(j["job_id"], safe="") for j in report["jobs"])
    saved = re.search(
        r'id="saved-energy">.*?<div class="value (saved|lost)">(-?[\d.]+) %', page, re.S
    )
    fleet = report["fleet"]
    assert saved and float(saved.group(2)) == pytest.approx(
        100 * fleet["saved_energy_fraction"], abs=0.05
    )  # the report's figure, on the page
    assert "e-0" not in page and "e+0" not in page  # readable magnitudes
    one_dag = get(api_server, "/zeus/jobs", viewer, cookie=True, dag=MAPPED_DAG).text
    assert re.findall(r'<a href="/zeus/jobs/([^"]+)">', one_dag) == [
        quote(j, safe="") for j in MAPPED_JOBS
    ]
    by_energy = get(api_server, "/zeus/jobs", viewer, cookie=True, sort="energy", desc="1").text
    energies = {j["job_id"]: j["energy_j"] for j in report["jobs"]}
    order = [energies[unquote(j)] for j in re.findall(r'<a href="/zeus/jobs/([^"]+)">', by_energy)]
    assert order == sorted(order, reverse=True) and 'aria-sort="descending"' in by_energy
    falling = get(api_server, "/zeus/jobs", viewer, cookie=True, fallback="1").text
    assert "No job matches these filters." in falling  # none of them falls back
    scoped = get(api_server, "/zeus/", alpha, cookie=True).text
    assert re.findall(r'<a href="/zeus/jobs/([^"]+)">', scoped) == [ALPHA_JOB]
    assert BETA_DAG not in scoped  # not even as a filter's choice
