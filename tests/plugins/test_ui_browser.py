"""The job page in a real browser (Debian's headless Chromium): log in through Airflow's login
page, see the charts drawn, in light and dark mode, on their own and inside Airflow's UI.

Screenshots go to ``artifacts/`` (ui-job-page.png, ui-job-page-dark.png, ui-dag-tab.png).
"""

from __future__ import annotations

import json
from urllib.parse import quote, urlsplit

from fixtures_ui import (
    ALPHA_DAG,
    ALPHA_JOB,
    ALPHA_RUNS,
    ARTIFACTS,
    MAPPED_DAG,
    MAPPED_JOBS,
    ApiServer,
    Browser,
    UIData,
)

JOB_PATH = f"/zeus/jobs/{ALPHA_JOB}"
CHARTS = (
    "energy",
    "time",
    "batch-size",
    "cumulative",
    "arms",
    "profile-power",
    "profile-throughput",
)

# What the browser drew: per chart, its marks and their laid-out size.
DRAWN = """(() => {
  const out = {};
  for (const fig of document.querySelectorAll('figure.panel')) {
    const svg = fig.querySelector('svg.chart');
    const box = svg.getBoundingClientRect();
    const circles = [...svg.querySelectorAll('circle')];
    out[fig.id.replace('chart-', '')] = {
      width: box.width, height: box.height,
      circles: circles.length,
      solid: circles.filter(c => !c.classList.contains('hollow')).length,
      paths: svg.querySelectorAll('path').length,
      lines: [...svg.querySelectorAll('path.line')].map(p => p.getTotalLength()),
      drawnCircles: circles.filter(c => { const b = c.getBBox(); return b.width > 0; }).length,
      fills: [...new Set(circles.map(c => getComputedStyle(c).fill))],
    };
  }
  return out;
})()"""
BACKGROUND = "getComputedStyle(document.body).backgroundColor"


def luminance(css_rgb: str) -> float:
    r, g, b = (int(v) for v in css_rgb[css_rgb.index("(") + 1 : -1].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def log_in(browser: Browser, server: ApiServer, path: str, user: str) -> None:
    """Open ``path``; the Zeus app sends the browser to Airflow's login page; sign in there
    as ``user`` (password = user name) and come back."""
    browser.goto(server.url + path)
    browser.wait_for("!!document.querySelector('input[name=password]')", what="the login form")
    assert urlsplit(browser.evaluate("location.href")).path == "/auth/login"
    browser.evaluate(f"""(() => {{
      const set = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
      for (const [name, value] of [['username', {json.dumps(user)}],
                                   ['password', {json.dumps(user)}]]) {{
        const input = document.querySelector(`input[name=${{name}}]`);
        set.call(input, value);
        input.dispatchEvent(new Event('input', {{bubbles: true}}));
      }}
    }})()""")
    browser.wait_for(
        "!document.querySelector('button[type=submit]').disabled", what="the sign-in button"
    )
    browser.evaluate("document.querySelector('button[type=submit]').click()")
    browser.wait_for(
        f"location.pathname === {json.dumps(path)} && document.readyState === 'complete'",
        what=f"{path} after the login",
    )


def test_logged_in_the_job_page_draws_its_charts(browser: Browser, api_server: ApiServer) -> None:
    log_in(browser, api_server, JOB_PATH, "viewer")
    drawn = browser.evaluate(DRAWN)
    assert set(CHARTS) <= set(drawn)
    for name in CHARTS:
        chart = drawn[name]
        assert chart["width"] > 300 and chart["height"] > 100, name
        assert chart["paths"] >= 3, name  # the axes, the grid and at least one series
        assert chart["drawnCircles"] == chart["circles"], name
        assert chart["circles"] > 0 or chart["lines"], name
        assert all(length > 10 for length in chart["lines"]), name
        assert "rgb(0, 0, 0)" not in chart["fills"], name  # coloured by the stylesheet
    assert len(drawn["cumulative"]["lines"]) == 2  # Zeus and the Default estimate
    assert drawn["batch-size"]["solid"] == ALPHA_RUNS  # hollow ones: earlier failed tries
    assert drawn["energy"]["circles"] == ALPHA_RUNS
    replayed_rows = "document.querySelectorAll('#runs-table .measurement-replayed').length"
    assert browser.evaluate(replayed_rows) == ALPHA_RUNS
    light = browser.evaluate(BACKGROUND)
    assert luminance(light) > 0.8
    browser.screenshot(ARTIFACTS / "ui-job-page.png")

    browser.send(
        "Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": "dark"}]
    )
    browser.wait_for(f"{BACKGROUND} !== {json.dumps(light)}", what="the dark colour scheme")
    assert luminance(browser.evaluate(BACKGROUND)) < 0.2
    dark_fills = browser.evaluate(DRAWN)["batch-size"]["fills"]
    assert dark_fills != drawn["batch-size"]["fills"]  # series colours follow the scheme
    browser.screenshot(ARTIFACTS / "ui-job-page-dark.png")


def test_inside_airflow_the_dag_tab_shows_the_job_in_airflows_theme(
    browser: Browser, api_server: ApiServer, ui_data: UIData
) -> None:
    tab = f"/dags/{ALPHA_DAG}/plugin/zeus_dag"
    log_in(browser, api_server, JOB_PATH, "viewer")
    browser.evaluate("localStorage.setItem('theme', 'dark')")  # Airflow's own theme choice
    browser.goto(api_server.url + tab)
    frame = "document.querySelector('iframe')?.contentDocument"
    browser.wait_for(
        f"{frame}?.querySelectorAll('svg.chart').length >= {len(CHARTS)}",
        timeout_s=90,
        what="the job page inside Airflow's DAG tab",
    )
    assert browser.evaluate(f"{frame}.location.pathname") == JOB_PATH
    assert browser.evaluate(f"{frame}.documentElement.dataset.theme") == "dark"
    assert luminance(browser.evaluate(f"getComputedStyle({frame}.body).backgroundColor")) < 0.2
    browser.screenshot(ARTIFACTS / "ui-dag-tab.png")

    # A mapped instance's tab: Airflow fills {MAP_INDEX} in, the tab opens that instance's job
    run_id = quote(ui_data.mapped_runs[0].run_id, safe="")
    browser.goto(
        f"{api_server.url}/dags/{MAPPED_DAG}/runs/{run_id}/tasks/train/mapped/0"
        "/plugin/zeus_task_instance"
    )
    job_path = f"/zeus/jobs/{quote(MAPPED_JOBS[0], safe='')}"
    browser.wait_for(
        f"{frame}?.location.pathname === {json.dumps(job_path)} && "
        f"{frame}.querySelectorAll('#runs-table tr.highlight').length === 1",
        timeout_s=90,
        what="instance 0's job inside Airflow's task instance tab",
    )


def test_the_fleet_page_draws_its_totals_and_chart_and_filters_in_the_browser(
    browser: Browser, api_server: ApiServer
) -> None:
    log_in(browser, api_server, "/zeus/", "viewer")
    drawn = browser.evaluate(DRAWN)["fleet-cumulative"]
    assert drawn["width"] > 300 and drawn["height"] > 100
    assert len(drawn["lines"]) == 2 and all(length > 10 for length in drawn["lines"])
    cards = browser.evaluate(
        "[...document.querySelectorAll('#fleet-totals .card')].map(c => c.innerText)"
    )
    assert any(c.startswith("Jobs") and "pruning" in c for c in cards)
    saved = next(c for c in cards if c.startswith("Energy saved vs Default"))
    assert "%" in saved and "J" in saved and "e-0" not in saved  # readable magnitudes
    rows = "document.querySelectorAll('#jobs tbody tr').length"
    every = browser.evaluate(rows)
    assert every == 3 + len(MAPPED_JOBS)  # alpha, beta, the CLI's and the mapped ones
    light = browser.evaluate(BACKGROUND)
    assert luminance(light) > 0.8
    browser.screenshot(ARTIFACTS / "ui-fleet-page.png")

    # Filter by a DAG through the form, as a person would, then sort by energy.
    browser.evaluate(f"""(() => {{
      document.querySelector('select[name=dag]').value = {json.dumps(MAPPED_DAG)};
      document.querySelector('#filters button[type=submit]').click();
    }})()""")
    browser.wait_for(
        f"location.search.includes('dag={MAPPED_DAG}') && "
        f"document.readyState === 'complete' && {rows} === {len(MAPPED_JOBS)}",
        what="the mapped DAG's jobs only",
    )
    browser.evaluate(
        "[...document.querySelectorAll('#jobs thead a.sort')]"
        ".find(a => a.textContent.startsWith('Energy')).click()"
    )
    browser.wait_for(
        "!!document.querySelector('#jobs thead th[aria-sort]')", what="the table sorted by energy"
    )
    assert f"dag={MAPPED_DAG}" in browser.evaluate("location.search")  # the filter stays

    browser.send(
        "Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": "dark"}]
    )
    browser.goto(api_server.url + "/zeus/")
    browser.wait_for(
        f"document.readyState === 'complete' && {BACKGROUND} !== {json.dumps(light)}",
        what="the dark colour scheme",
    )
    assert luminance(browser.evaluate(BACKGROUND)) < 0.2
    browser.screenshot(ARTIFACTS / "ui-fleet-page-dark.png")
