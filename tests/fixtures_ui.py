"""UI fixtures: a store filled by real DAG runs, a real ``airflow api-server``, and a headless
Chromium driven over the DevTools protocol.

The api-server shares the session's AIRFLOW_HOME (metadata DB with the DAG runs) and runs the
simple auth manager's users through :class:`DagScopedAuthManager`: the simple auth manager
gives every role read access to every DAG, so to test per-DAG filtering a user listed in
``$ZEUS_UI_TEST_DAG_SCOPES`` (``user=dag_a|dag_b;other=dag_c``) may read only those DAGs.
The api-server imports this module for that class, so it imports nothing heavy at the top.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts"
SCOPES_ENV = "ZEUS_UI_TEST_DAG_SCOPES"
USERS = {"admin": "admin", "viewer": "viewer", "alpha": "viewer"}
"""user -> simple auth manager role; each password is the user name."""
SCOPES = {"alpha": ("zeus_ui_alpha",)}
ALPHA_DAG, BETA_DAG = "zeus_ui_alpha", "zeus_ui_beta"
ALPHA_JOB, BETA_JOB, CLI_JOB = f"{ALPHA_DAG}.train", "beta_model", "cli_job"
ALPHA_RUNS, BETA_RUNS = 5, 2
MAPPED_DAG, REGIONS, MAPPED_RUNS = "zeus_ui_mapped", ("eu", "us"), 2
MAPPED_JOBS = tuple(f"{MAPPED_DAG}.train[{r}]" for r in REGIONS)
"""One job per mapped instance, named by its map_index_template."""
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 30


def __getattr__(name: str) -> Any:
    """``fixtures_ui.DagScopedAuthManager``, built when Airflow asks for it (PEP 562), so that
    loading these fixtures imports no Airflow."""
    if name == "DagScopedAuthManager":
        return _dag_scoped_auth_manager()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _dag_scoped_auth_manager() -> type:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class DagScopedAuthManager(SimpleAuthManager):
        """The simple auth manager, except that scoped users may read their DAGs only (and,
        as with FAB, DAGs in general only with access to every DAG)."""

        def is_authorized_dag(
            self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
        ) -> bool:
            scope = _scopes().get(user.get_name())
            if scope is None:
                return bool(
                    super().is_authorized_dag(
                        method=method, user=user, access_entity=access_entity, details=details
                    )
                )
            return method == "GET" and details is not None and details.id in scope

    return DagScopedAuthManager


def _scopes() -> dict[str, frozenset[str]]:
    text = os.environ.get(SCOPES_ENV, "")
    pairs = (item.split("=", 1) for item in text.split(";") if "=" in item)
    return {user: frozenset(dags.split("|")) for user, dags in pairs}


# --- the store, filled through real DAG runs ---------------------------------------------------
@dataclass(frozen=True)
class UIData:
    store_url: str
    alpha_runs: tuple[Any, ...]
    """The alpha DAG's DagRuns, oldest first."""
    beta_runs: tuple[Any, ...]
    mapped_runs: tuple[Any, ...]
    """The mapped DAG's DagRuns: a task mapped over ``REGIONS``."""


@pytest.fixture(scope="session")
def ui_data(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> UIData:
    """Three DAGs run through ``dag.test()`` on the replay device: the alpha DAG's job has
    the default id, the beta DAG's job a name of its own, the mapped DAG's task a job per
    instance. Another job ran outside Airflow."""
    from fixtures_airflow import daily, sync_dag

    from zeus_airflow import ZeusTrainOperator
    from zeus_airflow.core.store.sql import SQLStore
    from zeus_airflow.operators.replay import replay_job_settings, replay_train

    url = f"sqlite:///{tmp_path_factory.mktemp('ui-store') / 'zeus.db'}"
    SQLStore(url, create_schema=True).engine.dispose()
    settings = replay_job_settings("v100", "cifar100")

    def dag(dag_id: str, task_id: str, **extra: Any) -> Any:
        from airflow.sdk import DAG

        with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as built:
            ZeusTrainOperator(
                task_id=task_id,
                train=replay_train,
                heartbeat_s=5,
                device="replay:v100:cifar100",
                seed=7,
                **settings,
                **extra,
            )
        return sync_dag(built)

    def mapped() -> Any:
        from airflow.sdk import DAG

        with DAG(MAPPED_DAG, schedule="@daily", start_date=daily(0), catchup=False) as built:
            ZeusTrainOperator.partial(
                task_id="train",
                train=replay_region,
                heartbeat_s=5,
                device="replay:v100:cifar100",
                seed=7,
                **settings,
                map_index_template="{{ task.train_kwargs['region'] }}",
            ).expand(train_kwargs=[{"region": r} for r in REGIONS])
        return sync_dag(built)

    previous = os.environ.get("ZEUS_AIRFLOW_DB_URL"), signal.getsignal(signal.SIGTERM)
    os.environ["ZEUS_AIRFLOW_DB_URL"] = url
    try:
        alpha, beta = dag(ALPHA_DAG, "train"), dag(BETA_DAG, "fit", job_id=BETA_JOB)
        alpha_runs = tuple(alpha.test(logical_date=daily(d)) for d in range(ALPHA_RUNS))
        beta_runs = tuple(beta.test(logical_date=daily(d)) for d in range(BETA_RUNS))
        mapped_runs = tuple(mapped().test(logical_date=daily(d)) for d in range(MAPPED_RUNS))
    finally:
        # dag.test() installs a SIGTERM handler of its own in this process
        signal.signal(signal.SIGTERM, previous[1])
        if previous[0] is None:
            os.environ.pop("ZEUS_AIRFLOW_DB_URL", None)
        else:
            os.environ["ZEUS_AIRFLOW_DB_URL"] = previous[0]
    assert all(r.state == "success" for r in alpha_runs + beta_runs + mapped_runs)
    _run_outside_airflow(url, CLI_JOB)
    return UIData(url, alpha_runs, beta_runs, mapped_runs)


def replay_region(run: Any, region: str) -> dict[str, float]:
    """One region's training, replayed (every region replays the same traces)."""
    from zeus_airflow.operators.replay import replay_train

    return replay_train(run)


def _run_outside_airflow(url: str, job_id: str) -> None:
    """One recurrence through the engine itself, as the CLI runs it: no DAG."""
    from zeus_airflow.core.common.config import JobConfig
    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.devices.replay import ReplayGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.store.base import RecurrenceKey
    from zeus_airflow.core.store.sql import SQLStore
    from zeus_airflow.core.train.engine import Engine
    from zeus_airflow.core.train.replay_training import ReplayTraining

    trace = load_workload_trace(resolve_traces_dir(), "v100", "cifar100")
    gpu, store = ReplayGPU(trace), SQLStore(url)
    config = JobConfig(
        job_id,
        trace.batch_sizes,
        trace.default_batch_size,
        trace.workload.target_metric,
        trace.workload.max_epochs,
    )
    Engine(store, gpu, config, seed=1, heartbeat_s=None).run_recurrence(
        ReplayTraining(gpu, 1), RecurrenceKey(run_id="cli-1")
    )
    store.engine.dispose()


def app_client(store: Any, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    """The Zeus app in this process over ``store``, as a reader of every DAG: a TestClient
    (needs the ``airflow_db`` fixture)."""
    from fastapi.testclient import TestClient

    from zeus_airflow.plugins import queries
    from zeus_airflow.plugins.access import DagAccess
    from zeus_airflow.plugins.app import create_app
    from zeus_airflow.plugins.auth import dag_access

    app = create_app()
    app.dependency_overrides[dag_access] = lambda: DagAccess(all_dags=True, dag_ids=frozenset())
    monkeypatch.setattr(queries, "store", lambda: store)
    return TestClient(app, root_path="/zeus")


# --- the api-server ------------------------------------------------------------------------------
@dataclass
class ApiServer:
    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def token(self, user: str) -> str:
        body = json.dumps({"username": user, "password": user}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return str(json.load(answer)["access_token"])

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Any, timeout_s: float, what: str, every_s: float = 0.25) -> Any:
    """Poll ``condition()`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(every_s)
    raise TimeoutError(f"gave up after {timeout_s} s waiting for {what}")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def stop_process_group(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the group the process leads (it was started in a session of its own),
    then SIGKILL after ``STOP_TIMEOUT_S``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT_S)


def start_api_server(work: Path, users: dict[str, str], env: dict[str, str]) -> ApiServer:
    """``airflow api-server`` on a free 127.0.0.1 port, one worker, with the simple auth
    manager's ``users`` (user -> role; password = user name) and ``env`` on top of this
    process's environment. Returns once it answers; stop it with :func:`stop_process_group`."""
    passwords = work / "passwords.json"
    passwords.write_text(json.dumps({user: user for user in users}))
    port = free_port()
    full_env = {
        **os.environ,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        **env,
    }
    log = work / "api-server.log"
    with log.open("wb") as out:
        # cwd outside the repo: an editable install's .egg-info there would register the
        # plugin twice (importlib.metadata would find the distribution twice).
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "airflow"),
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            cwd=work,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = ApiServer(f"http://127.0.0.1:{port}", log, process)
    try:
        wait_until(
            lambda: process.poll() is not None or _healthy(server.url),
            START_TIMEOUT_S,
            "the api-server to answer",
            every_s=0.5,
        )
    except BaseException:
        stop_process_group(process)
        raise
    if process.poll() is not None:
        raise RuntimeError(f"api-server exited:\n{server.log_text()[-3000:]}")
    return server


@pytest.fixture(scope="session")
def api_server(ui_data: UIData, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The api-server over the session's AIRFLOW_HOME and the UI store, with the per-DAG
    auth manager."""
    server = start_api_server(
        tmp_path_factory.mktemp("api-server"),
        USERS,
        {
            "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
            "AIRFLOW__CORE__AUTH_MANAGER": "fixtures_ui.DagScopedAuthManager",
            SCOPES_ENV: ";".join(f"{u}={'|'.join(d)}" for u, d in SCOPES.items()),
            "ZEUS_AIRFLOW_DB_URL": ui_data.store_url,
        },
    )
    try:
        yield server
    finally:
        stop_process_group(server.process)


# --- headless Chromium over the DevTools protocol -------------------------------------------------
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1400,1000",
)


class Browser:
    """One page of a headless Chromium, driven by DevTools protocol commands."""

    def __init__(self, connection: Any) -> None:
        self._ws = connection
        self._next_id = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        self._ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=60))
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout_s: float = 60, what: str = "") -> Any:
        def check() -> Any:
            try:
                return self.evaluate(expression)
            except RuntimeError:  # navigating: the context is being replaced
                return None

        return wait_until(check, timeout_s, what or expression)

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """A fresh headless Chromium (its own profile), stopped afterwards."""
    from websockets.sync.client import connect

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "Debian's chromium is needed: apt-get install -y chromium"
    profile = Path(tempfile.mkdtemp(prefix="zeus-chromium-", dir=tmp_path))
    process = subprocess.Popen(
        [
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        wait_until(port_file.exists, 60, "Chromium's DevTools port")
        port = int(port_file.read_text().split()[0])

        def page_target() -> str | None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            return pages[0]["webSocketDebuggerUrl"] if pages else None

        with connect(
            wait_until(page_target, 30, "Chromium's page"), max_size=64 * 2**20, open_timeout=30
        ) as connection:
            driver = Browser(connection)
            driver.send("Page.enable")
            driver.send("Runtime.enable")
            yield driver
    finally:
        stop_process_group(process)


VIEWPORT_W = 1280


def artifact(tmp_path: Path, name: str) -> Path:
    """Where a screenshot goes: ``$ZEUS_ARTIFACTS`` (relative to the repository) when set
    (``scripts/ui_screenshots.py`` sets ``artifacts``), else the test's temporary folder."""
    folder = os.environ.get("ZEUS_ARTIFACTS")
    return (REPO / folder if folder else tmp_path) / name


OVERFLOW = """(() => {
  const root = document.documentElement;
  const out = {page: [root.scrollWidth, root.clientWidth]};
  for (const table of document.querySelectorAll('.table-wrap > table')) {
    const wrap = table.parentElement;
    out[table.id] = [wrap.scrollWidth, wrap.clientWidth];
  }
  return out;
})()"""
"""Scroll width against client width (px) of the page and of each table's container: the
containers scroll sideways only as a last resort, and none needs to here."""


def open_page(browser: Browser, html: str, path: Path) -> None:
    """``html`` saved at ``path`` and opened at a 1,280 px wide viewport, loaded."""
    path.write_text(html)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        width=VIEWPORT_W,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    browser.goto(path.as_uri())
    browser.wait_for("document.readyState === 'complete'", what=path.name)
