"""The Airflow side of ``zeus-airflow demo``: run the replay DAG for consecutive days.

Started by the demo command as ``python -m zeus_airflow.cli.demo_runs`` with the demo's
Airflow environment already set, because Airflow reads its configuration once, on import.
Each day is one ``dag.test()``: a real DAG run in the metadata DB, its task run by Airflow's
task runner in this process, one after the other, as a daily schedule would run them. The
figures of every run are written as JSON for the demo command to report on.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

DAG_ID = "zeus_replay_daily"
TASK_ID = "train"
FIGURES = (
    "energy_j",
    "time_s",
    "cost",
    "batch_size",
    "power_limit_w",
    "phase",
    "tries",
    "reached_target",
    "measurement",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zeus_airflow.cli.demo_runs")
    parser.add_argument("--days", type=int, required=True)
    parser.add_argument("--dags-folder", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)

    from airflow.utils import db

    started = time.monotonic()
    db.initdb()  # what `airflow db migrate` does; a no-op on an up-to-date database
    print(f"Airflow metadata DB ready ({time.monotonic() - started:.1f} s)", flush=True)
    dag = _load_dag(args.dags_folder / f"{DAG_ID}.py")
    first = _next_day(dag)
    task = dag.get_task(TASK_ID)
    runs = []
    started = time.monotonic()
    for day in range(args.days):
        runs.append(_run_day(dag, first + timedelta(days=day), day, args.days))
    print(f"{args.days} DAG runs in {time.monotonic() - started:.0f} s", flush=True)
    args.results.write_text(
        json.dumps({"device": task.device, "eta": task.eta, "runs": runs}, indent=1, default=str)
    )
    return 0 if all(run["state"] == "success" for run in runs) else 1


def _load_dag(path: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(path))
    if bag.import_errors or bag.get_dag(DAG_ID) is None:
        raise SystemExit(f"cannot load {DAG_ID} from {path}: {bag.import_errors}")
    return bag.get_dag(DAG_ID)


def _next_day(dag: Any) -> datetime:
    """The day after the DAG's latest run (a second demo goes on learning), or its start."""
    from zeus_airflow.airflow_db import latest_logical_date

    latest = latest_logical_date(DAG_ID)
    return latest + timedelta(days=1) if latest is not None else dag.start_date


def _run_day(dag: Any, logical_date: datetime, day: int, days: int) -> dict[str, Any]:
    # run_after = the logical date names the run after its day, as the scheduler would.
    dag_run = dag.test(logical_date=logical_date, run_after=logical_date)
    figures = _xcoms(dag_run.run_id)
    summary = _summary(dag_run.run_id)
    print(
        f"  {day + 1:>3}/{days}  {logical_date:%Y-%m-%d}  {dag_run.state:<7}  {summary}  "
        f"[{figures.get('phase', '-')}]",
        flush=True,
    )
    return {
        "run_id": dag_run.run_id,
        "logical_date": logical_date.isoformat(),
        "state": str(dag_run.state),
        **{k: figures.get(k) for k in FIGURES},
    }


def _xcoms(run_id: str) -> dict[str, Any]:
    from zeus_airflow.airflow_db import xcoms

    return xcoms(DAG_ID, run_id, TASK_ID, FIGURES)


def _summary(run_id: str) -> str:
    """The task's summary, as its Rendered Templates tab shows it, on one line again (it is
    wrapped there: ``summary.wrap_summary``)."""
    from zeus_airflow.airflow_db import rendered_fields

    shown = rendered_fields(DAG_ID, run_id, TASK_ID).get("zeus_summary", "(no summary)")
    return str(shown).replace("\n", " ")


if __name__ == "__main__":
    raise SystemExit(main())
