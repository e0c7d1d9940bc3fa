"""The operator's own overhead per run: everything ``execute()`` does but the train function.

That is: resolving the store (the Airflow Connection lookup included) and checking its schema,
opening the device, the power-limit guard, registering the job, the decision (one transaction),
loading and saving the power profile, recording the result, and the XComs through Airflow's
Execution API (``xcom_push``: the run's, and the outbox's read and keep). Each run is a real
``dag.test()`` of a one-task DAG on the replay GPU (cifar100 on a V100), in a fresh AIRFLOW_HOME
on SQLite; the train function times itself and is subtracted. The first run (Airflow's
in-process API warming up) is left out. For comparison, a second DAG's bare ``BaseOperator``
pushes as many XComs (``XCOM_KEYS``, 19) with no Zeus code at all: Airflow's own floor for them
(``airflow_floor``).

With ``--openlineage``, Airflow's OpenLineage provider is on (a file transport in the Airflow
home; ``execute_in_thread``, so that the provider asks for the task's facets in this process
and the time is measured): the run's published record is built in ``execute()``
(``integrations``: the Default estimate's reads included) and the ``zeus`` facet after it
(``lineage_facet``), both ours. The provider's own work (building and writing its events) is
not counted.

    .venv/bin/python bench/operator_overhead.py [--runs 40] [--db URL] [--traces DIR]
        [--openlineage] [--clock wall|cpu]

Ends with one line: ``runs=<n> overhead_median_ms=<x> overhead_p90_ms=<x> ... ours_median_ms=<x>``
(``ours``: everything but the train function and Airflow's XCom calls, the facet included).
Target: median <= 50 ms on SQLite. Not counted by either: the ``return_value`` XCom Airflow
pushes after ``execute()`` returns (one more Execution API call).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

DAG_FILE = """
import pendulum
from airflow.sdk import DAG
from zeus_airflow.operators.replay import replay_job_settings

import operator_overhead_timing as timing

with DAG("overhead", schedule="@daily", start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
         catchup=False):
    timing.TimedOperator(task_id="train", train=timing.timed_replay_train,
                         device="replay:v100:cifar100", heartbeat_s=60,
                         **replay_job_settings("v100", "cifar100"))

with DAG("xcom_floor", schedule="@daily", start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
         catchup=False):
    timing.FloorXComsOperator(task_id="push")
"""

TIMING_MODULE = '''
import os
import time
from airflow.sdk import BaseOperator
from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators import xcoms
from zeus_airflow.operators.replay import replay_train

# --clock cpu: this thread's CPU time, which a loaded machine's waits do not inflate.
CLOCK = time.thread_time if os.environ.get("ZEUS_BENCH_CLOCK") == "cpu" else time.perf_counter
SPANS = []
FLOOR_SPANS = []
from zeus_airflow.operators.summary import XCOM_KEYS

# As many XComs as the operator pushes for a run (XCOM_KEYS), so the floor stays comparable.
FLOOR_XCOMS = {key: 1234.5 for key in XCOM_KEYS}


class FloorXComsOperator(BaseOperator):
    """Airflow alone: as many XComs as the operator's, no Zeus code (the floor any operator
    pays)."""

    def execute(self, context):
        start = CLOCK()
        for key, value in FLOOR_XCOMS.items():
            context["ti"].xcom_push(key=key, value=value)
        FLOOR_SPANS.append(CLOCK() - start)


def _timed_as_xcoms(function):
    """The outbox is an XCom: reading the earlier run's and clearing or keeping it are two
    more Execution API calls, Airflow's time as the other XComs are."""

    def timed(*args, **kwargs):
        start = CLOCK()
        try:
            return function(*args, **kwargs)
        finally:
            SPANS[-1]["xcom_s"] += CLOCK() - start

    return timed


# The operator imports them from the module when it runs, so it gets the timed ones.
xcoms.earlier_outbox = _timed_as_xcoms(xcoms.earlier_outbox)
xcoms.keep_outbox = _timed_as_xcoms(xcoms.keep_outbox)


def timed_replay_train(run):
    start = CLOCK()
    try:
        return replay_train(run)
    finally:
        SPANS[-1]["train_s"] += CLOCK() - start


class TimedOperator(ZeusTrainOperator):
    def execute(self, context):
        span = {"train_s": 0.0, "store_s": 0.0, "xcom_s": 0.0, "elsewhere_s": 0.0, "facet_s": 0.0}
        SPANS.append(span)
        start = CLOCK()
        try:
            return super().execute(context)
        finally:
            span["execute_s"] = CLOCK() - start

    def _open_store(self):
        start = CLOCK()
        try:
            return super()._open_store()
        finally:
            SPANS[-1]["store_s"] += CLOCK() - start

    def _publish_elsewhere(self, *args, **kwargs):
        start = CLOCK()
        try:
            return super()._publish_elsewhere(*args, **kwargs)
        finally:
            SPANS[-1]["elsewhere_s"] += CLOCK() - start

    def get_openlineage_facets_on_complete(self, task_instance):
        start = CLOCK()
        try:
            return super().get_openlineage_facets_on_complete(task_instance)
        finally:
            SPANS[-1]["facet_s"] += CLOCK() - start

    def _publish(self, context, result, *args, **kwargs):
        # Passes on whatever else the operator publishes (the carbon footprint, ...), so that
        # a new argument does not break the timing again.
        start = CLOCK()
        try:
            return super()._publish(context, result, *args, **kwargs)
        finally:
            SPANS[-1]["xcom_s"] += CLOCK() - start
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument(
        "--quick", action="store_true", help="3 runs: that the script runs (the suite runs it)"
    )
    parser.add_argument("--db", help="store URL (default: an SQLite file in the Airflow home)")
    parser.add_argument(
        "--dir",
        help="where to make the Airflow home (default: the system's "
        "temp folder); /dev/shm takes the disk's fsync out",
    )
    parser.add_argument(
        "--traces", help="default: $ZEUS_TRACES_DIR, else the traces shipped in the package"
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: elapsed time (the target's); cpu: the task thread's CPU time, which other "
        "processes on a loaded machine do not inflate (Airflow's XCom work, mostly in the "
        "in-process API's thread, then counts for little)",
    )
    parser.add_argument(
        "--openlineage",
        action="store_true",
        help="Airflow's OpenLineage provider on (a file transport): the zeus facet's cost",
    )
    args = parser.parse_args()
    if args.quick:
        args.runs = 3
    home = Path(tempfile.mkdtemp(prefix="zeus-bench-airflow-", dir=args.dir))
    (home / "dags").mkdir()
    (home / "dags" / "overhead_dag.py").write_text(DAG_FILE)
    (home / "dags" / "operator_overhead_timing.py").write_text(TIMING_MODULE)
    sys.path.insert(0, str(home / "dags"))
    if args.traces:  # else $ZEUS_TRACES_DIR as inherited, else the packaged traces
        os.environ["ZEUS_TRACES_DIR"] = args.traces
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "ZEUS_AIRFLOW_DB_URL": args.db or f"sqlite:///{home}/zeus.db",
        }
    )
    os.environ["ZEUS_BENCH_CLOCK"] = args.clock
    if args.openlineage:
        lineage = {"type": "file", "log_file_path": str(home / "ol.jsonl"), "append": True}
        os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(lineage)
        os.environ["AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD"] = "True"
    from zeus_airflow.core.store.sql import SQLStore

    SQLStore(os.environ["ZEUS_AIRFLOW_DB_URL"], create_schema=True).engine.dispose()
    try:
        spans, floor = run(args.runs)
        if args.openlineage:
            sent = facets_sent(home / "ol.jsonl")
            print(f"OpenLineage: {sent} COMPLETE events carried the zeus facet")
            if sent < args.runs:
                raise SystemExit(f"only {sent} of {args.runs} events carried the facet")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    lineage_said = "on" if args.openlineage else "off"
    where = (
        f"{args.db or 'SQLite'}, Airflow home in {home.parent}, OpenLineage {lineage_said}, "
        f"{args.clock} clock"
    )
    report(spans[1:], floor[1:], where)
    return 0


def run(runs: int) -> tuple[list[dict[str, float]], list[float]]:
    """Run both DAGs ``runs`` times; the operator's spans and the bare operator's XCom times (s)."""
    import operator_overhead_timing as timing  # type: ignore[import-not-found]
    import pendulum
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils import db

    db.initdb()
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    for dag_id in ("overhead", "xcom_floor"):
        dag = bag.get_dag(dag_id)
        for day in range(runs):
            date = pendulum.datetime(2025, 1, 1, tz="UTC").add(days=day)
            dag_run = dag.test(logical_date=date, run_after=date)
            if dag_run.state != "success":
                raise SystemExit(f"{dag_id}: run {day} ended {dag_run.state}")
    spans: list[dict[str, float]] = timing.SPANS
    floor: list[float] = timing.FLOOR_SPANS
    return spans, floor


def facets_sent(events: Path) -> int:
    """The COMPLETE events in the file transport's output that carry the ``zeus`` facet."""
    if not events.exists():
        return 0
    found = [json.loads(line) for line in events.read_text().splitlines()]
    return sum(e["eventType"] == "COMPLETE" and "zeus" in e["run"]["facets"] for e in found)


def report(spans: list[dict[str, Any]], floor: list[float], where: str) -> None:
    def ms(values: list[float], q: float) -> float:
        values = sorted(values)
        return 1000 * values[min(len(values) - 1, int(q * len(values)))]

    overhead = [s["execute_s"] - s["train_s"] for s in spans]
    parts = {
        "store_open": [s["store_s"] for s in spans],
        "xcom_push": [s["xcom_s"] for s in spans],
        "engine_and_device": [
            s["execute_s"] - s["train_s"] - s["store_s"] - s["xcom_s"] - s["elsewhere_s"]
            for s in spans
        ],
        "integrations": [s["elsewhere_s"] for s in spans],
        "lineage_facet": [s["facet_s"] for s in spans],
        "train_function": [s["train_s"] for s in spans],
    }
    print(f"store: {where}; {len(spans)} runs measured (the first left out)")
    for name, values in parts.items():
        print(
            f"  {name:<18} median {1000 * statistics.median(values):7.1f} ms   "
            f"p90 {ms(values, 0.9):7.1f} ms"
        )
    print(
        f"  {'airflow_floor':<18} median {1000 * statistics.median(floor):7.1f} ms   "
        f"p90 {ms(floor, 0.9):7.1f} ms   (a bare BaseOperator pushing as many XComs)"
    )
    ours = [s["execute_s"] - s["train_s"] - s["xcom_s"] + s["facet_s"] for s in spans]
    print(
        f"runs={len(spans)} overhead_median_ms={1000 * statistics.median(overhead):.1f} "
        f"overhead_p90_ms={ms(overhead, 0.9):.1f} overhead_max_ms={1000 * max(overhead):.1f} "
        f"ours_median_ms={1000 * statistics.median(ours):.1f} ours_p90_ms={ms(ours, 0.9):.1f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
