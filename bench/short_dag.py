"""A short daily ``@task.zeus`` job through the real scheduler on a busy machine: does the
exploration budget hold, and what does the job's report say it saved?

    .venv/bin/python bench/short_dag.py [--days 12] [--quick] [--power-limit-mode measure]
        --output bench/short_dag

Writes a DAG as a new user would from the README (``@task.zeus`` on a train function that
retrains the example classifier from scratch on each day's sample with real PyTorch on the
CPU, the simulated V100, the operator's defaults: the 10 % budget), catches it up over
``--days`` daily runs through Airflow's real api-server, dag-processor and scheduler
(LocalExecutor), while a CPU-bound loop competes for the cores. Each run is a few hundred
steps, under a second of training. Then reads what a user reads: ``zeus-airflow runs`` and
``zeus-airflow report`` (JSON). Prints and writes (<output>.md, <output>.csv) per run: the
batch sizes tried, the phase, the cost, the budget left after it (the books' one figure),
and the job's savings against Default as the report computes them. Energy is **simulated**
(real steps on the CPU, timed; the V100's traced power curve). Exits 1 when the budget left
was ever negative, or the report's cost savings end below 0 % (not with ``--quick``: 2 days,
what the suite runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from zeus_airflow.cli.options import add_output_option, bench_output
from zeus_airflow.cli.output import write_csv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from scheduler_harness import AIRFLOW, catching_up_home, running_servers, wait_for_runs

DAG_ID = "short_daily"
JOB_ID = f"{DAG_ID}.train"
DAG_SOURCE = '''
import pendulum
from airflow.sdk import dag, task

from zeus_airflow import TrainingRun


@dag(
    schedule="@daily",
    start_date=pendulum.parse("{start}"),
    catchup=True,
    max_active_runs=1,
    tags=["zeus", "simulated"],
)
def short_daily():
    @task.zeus(
        batch_sizes=[16, 32, 64, 128, 256],
        default_batch_size=64,
        target_metric=0.8,
        max_epochs=10,
        device="simulated:v100",
        power_limit_mode="POWER_LIMIT_MODE",
    )
    def train(run: TrainingRun, day: str) -> float:
        """The day's sample: 1,536 points, about 150-190 steps at the default size."""
        import torch

        from zeus_airflow.examples import classifier

        torch.set_num_threads(1)
        task = classifier.Task(
            centres_seed=0, spread=0.55, train_samples=1536, validation_samples=512
        )
        return task.retrain(run, seed=int(day))

    train(day="{{{{ ds_nodash }}}}")


short_daily()
'''
BUSY_LOOP_S = 1800
BUSY_LOOP = (
    f"import time\nend = time.monotonic() + {BUSY_LOOP_S}\nwhile time.monotonic() < end: pass\n"
)
COLUMNS = [
    "run",
    "batch_sizes",
    "phase",
    "cost",
    "default_cost",
    "budget_left_runs",
    "status",
    "measurement",
]


def migrated_db(folder: Path) -> Path:
    """A freshly migrated Airflow metadata DB of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(folder),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{folder}/airflow.db",
    )
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
    return folder / "airflow.db"


def read_json(env: dict[str, str], *command: str) -> Any:
    """What ``zeus-airflow <command> --format json`` prints, on the DAG's home's store."""
    cli = str(Path(sys.executable).with_name("zeus-airflow"))
    done = subprocess.run(
        [cli, *command, "--format", "json"], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout)


def run_days(
    days: int, work: Path, mode: str = "optimize"
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The DAG caught up over ``days`` days on a busy machine, its ``power_limit_mode``
    ``mode``: its runs and its report."""
    pristine = migrated_db(work / "pristine")
    home = work / "airflow"
    source = DAG_SOURCE.replace("POWER_LIMIT_MODE", mode)
    env = catching_up_home(home, pristine, f"{DAG_ID}.py", source, days)
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        with running_servers(env, work) as started:
            finished = wait_for_runs(home, DAG_ID, days, started, 300.0 + 90.0 * days)
    finally:
        busy.kill()
        busy.wait(timeout=10)
    failed = [run_id for run_id, state in finished if state != "success"]
    if failed:
        raise SystemExit(f"DAG runs that did not succeed: {failed} (logs under {home})")
    return read_json(env, "runs", "--job", JOB_ID), read_json(env, "report", "--job", JOB_ID)


def tried(one_try: dict[str, Any]) -> str:
    """A try's batch size, and why it stopped when it did not run to its end."""
    reason = one_try["stop_reason"]
    ended = reason in (None, "target", "max_epochs")
    return str(one_try["batch_size"]) + ("" if ended else f" ({reason})")


def rows_of(tries: list[dict[str, Any]]) -> list[dict[str, object]]:
    """One row per run from ``zeus-airflow runs``' one per try (decision order): the sizes it
    tried, its cost summed, the rest its last try's."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for t in tries:
        runs.setdefault(t["run_id"], []).append(t)
    rows: list[dict[str, object]] = []
    for run_id, mine in runs.items():
        last = mine[-1]
        left = last["budget_left_runs"]
        rows.append(
            {
                "run": run_id,
                "batch_sizes": "/".join(tried(t) for t in mine),
                "phase": last["phase"],
                "cost": round(sum(t["cost"] or 0.0 for t in mine), 2),
                "default_cost": round(sum(t["default_cost"] or 0.0 for t in mine), 2),
                "budget_left_runs": None if left is None else round(left, 3),
                "status": last["status"],
                "measurement": last["measurement"],
            }
        )
    return rows


def markdown(rows: list[dict[str, object]], job: dict[str, Any]) -> list[str]:
    lines = [
        "| run | batch sizes tried | phase | cost | budget left after (Default runs) | status |",
        "|---|---|---|---|---|---|",
        *[
            f"| {r['run']} | {r['batch_sizes']} | {r['phase']} | {r['cost']} | "
            f"{r['budget_left_runs']} | {r['status']} |"
            for r in rows
        ],
        "",
        f"`zeus-airflow report`: cost {job['cost']:.1f} against Default's "
        f"{job['default_cost']:.1f} (saved {100 * job['saved_cost_fraction']:.1f} %), energy "
        f"saved {100 * job['saved_energy_fraction']:.1f} %, phase {job['phase']}, budget left "
        f"{job['budget_left_runs']:.2f} Default runs; all figures simulated (real PyTorch "
        "steps on a busy CPU, the V100's traced power curve).",
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="2 days: that the script runs")
    parser.add_argument(
        "--power-limit-mode",
        choices=("optimize", "measure"),
        default="optimize",
        help="the job's power_limit_mode (measure: as where limits cannot move)",
    )
    add_output_option(parser, "short_dag")
    args = parser.parse_args()
    args.output = bench_output(args.output, args.quick, "short_dag")
    days = 2 if args.quick else args.days
    work = Path(tempfile.mkdtemp(prefix="zeus-short-dag-"))
    runs, report = run_days(days, work, args.power_limit_mode)  # kept on failure, for its logs
    shutil.rmtree(work, ignore_errors=True)
    (job,) = report["jobs"]
    rows = rows_of(runs)
    write_csv(args.output.with_suffix(".csv"), COLUMNS, rows)
    lines = markdown(rows, job)
    args.output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    over = [
        r
        for r in rows
        if r["budget_left_runs"] is not None and float(str(r["budget_left_runs"])) < 0
    ]
    lost = job["saved_cost_fraction"] is not None and job["saved_cost_fraction"] < 0
    return 1 if (over or lost) and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
