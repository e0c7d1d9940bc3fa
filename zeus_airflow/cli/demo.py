"""``zeus-airflow demo``: Zeus learning a replayed paper workload through Airflow, end to end.

1. Airflow on SQLite in ``$AIRFLOW_HOME`` (``./.airflow`` when unset), migrated;
2. the DAG ``zeus_replay_daily`` run for ``--days`` consecutive daily logical dates, one
   ``dag.test()`` per day (see ``demo_runs.py`` and docs/operator.md for why not a backfill);
3. the store's per-try table (``zeus-airflow runs``) and the job's report against Default's
   estimate (``zeus-airflow report``), then the report's headline (what the job saved, with
   each saving's 95 % interval), and how to open the UI.

One Default for every saving: the job's own estimate, the one every surface compares with
(``core/reports/default.py``); the figures are replayed, not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import zeus_airflow
from zeus_airflow.cli import help_of
from zeus_airflow.cli.demo_runs import DAG_ID, TASK_ID
from zeus_airflow.cli.options import TRACES_HELP
from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.common.naming import default_job_id, job_url
from zeus_airflow.core.devices.spec import TRACES_ENV, resolve_traces_dir

DEFAULT_DAYS = 60
LOCAL_HOME = ".airflow"


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help=help_of("demo"),
    )
    demo.add_argument(
        "--days",
        type=int,
        default=DEFAULT_DAYS,
        help=f"daily runs to make (default {DEFAULT_DAYS})",
    )
    demo.add_argument("--traces", metavar="DIR", help=TRACES_HELP)
    demo.add_argument(
        "--airflow-home", metavar="DIR", help=f"default: $AIRFLOW_HOME, else ./{LOCAL_HOME}"
    )
    demo.add_argument(
        "--dags-folder",
        metavar="DIR",
        help="folder holding zeus_replay_daily.py (default: the repository's dags/)",
    )
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    if args.days < 1:
        raise ConfigError(f"days={args.days} is invalid: expected an integer >= 1")
    traces = resolve_traces_dir(args.traces).resolve()
    home = Path(args.airflow_home or os.environ.get("AIRFLOW_HOME") or LOCAL_HOME).resolve()
    dags = _dags_folder(args.dags_folder)
    env = demo_environment(home, dags, traces)
    print(f"Airflow home: {home} (SQLite)\nDAGs folder:  {dags}\n")
    # -P: with the working directory on sys.path, a checkout's zeus_airflow.egg-info makes
    # Airflow see the package, and load its plugin, twice (importlib.metadata finds the
    # distribution there and in the virtual environment).
    with tempfile.TemporaryDirectory() as scratch:
        results_file = Path(scratch) / "runs.json"
        done = subprocess.run(
            [
                sys.executable,
                "-P",
                "-m",
                "zeus_airflow.cli.demo_runs",
                "--days",
                str(args.days),
                "--dags-folder",
                str(dags),
                "--results",
                str(results_file),
            ],
            env=env,
        )
        if not results_file.exists():
            return done.returncode or 1
    job_id = default_job_id(DAG_ID, TASK_ID)
    for command in (["runs", "--job", job_id], ["report", "--job", job_id]):
        print(f"\n$ zeus-airflow {' '.join(command)}", flush=True)
        subprocess.run(
            [sys.executable, "-P", "-m", "zeus_airflow.cli", *command], env=env, check=False
        )
    print(report_headline(env, job_id))
    print(ui_instructions(home, dags, traces, job_id))
    return done.returncode


def demo_environment(home: Path, dags: Path, traces: Path) -> dict[str, str]:
    """The demo's Airflow: its own home, the repository's DAGs, the embedded store."""
    env = dict(os.environ)
    env.pop("ZEUS_AIRFLOW_DB_URL", None)  # never a production store: the one under home
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",  # one line per run, not hundreds
            "PYTHONWARNINGS": "ignore",
            TRACES_ENV: str(traces),
        }
    )
    return env


def report_headline(env: dict[str, str], job_id: str) -> str:
    """The report's headline for the demo's job (``report.headline``): the one saving the
    demo states, and the one the README quotes."""
    from zeus_airflow.cli.report import headline
    from zeus_airflow.cli.views import wrapped

    done = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "zeus_airflow.cli",
            "report",
            "--job",
            job_id,
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"\nNo report: {done.stderr.strip()}"
    fleet = json.loads(done.stdout)["fleet"]
    said = f"Zeus over the {fleet['runs']} runs ({_provenance(fleet)}): {headline(fleet)}."
    return "\n" + wrapped(said)


def _provenance(fleet: dict[str, object]) -> str:
    """Where the figures come from, in words (honest numbers: the demo's are not measured)."""
    measurement = str(fleet["measurement"])
    return "replayed from the paper's traces" if measurement == "replayed" else measurement


UI_PORT = 8080
"""The port the printed UI command uses; any free port works (``$PORT`` in the command)."""


def ui_instructions(home: Path, dags: Path, traces: Path, job_id: str) -> str:
    """How to open the UI on the demo's Airflow. The Execution API URL follows the port:
    Airflow's default names 8080, and on another port every task would fail with
    "Connection refused"."""
    airflow = Path(sys.executable).parent / "airflow"
    job = f"http://127.0.0.1:$PORT{job_url(job_id)}"
    return "\n".join(
        [
            "",
            "See the runs in the Airflow UI:",
            f"  export PORT={UI_PORT}  # or any free port: the Execution API URL follows it",
            f"  AIRFLOW_HOME={home} AIRFLOW__CORE__DAGS_FOLDER={dags} \\",
            f"    {TRACES_ENV}={traces} \\",
            "    AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$PORT/execution/ \\",
            f"    {airflow} api-server --host 127.0.0.1 --port $PORT",
            "  then open http://127.0.0.1:$PORT and log in as admin with the password in",
            f"  {home / 'simple_auth_manager_passwords.json.generated'} (written when the server "
            "starts).",
            "  Zeus energy in the navigation bar is the fleet page. DAG "
            f"{DAG_ID} > a run > task {TASK_ID}:",
            "  Rendered Templates (zeus_summary); Storage > XCom (energy_j, batch_size...; every "
            "run's: Browse > XComs);",
            f"  Details > Extra Links > Zeus job ({job}); the Zeus energy tab.",
        ]
    )


def _dags_folder(explicit: str | None) -> Path:
    folder = Path(explicit) if explicit else Path(zeus_airflow.__file__).parents[1] / "dags"
    if not (folder / f"{DAG_ID}.py").is_file():
        raise ConfigError(
            f"dags_folder={str(folder)!r} is invalid: expected a folder holding "
            f"{DAG_ID}.py (pass --dags-folder DIR)"
        )
    return folder.resolve()
