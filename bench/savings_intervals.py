"""Savings with their intervals: the demo's job, and a job whose savings are within noise.

    .venv/bin/python bench/savings_intervals.py [--days 60] [--quick]

Two replayed jobs of the demo's workload (DeepSpeech2 on LibriSpeech, V100 traces; the demo
DAG's settings), run day by day through the real engine and store on the replay GPU:

* ``demo.train``: Zeus as the demo runs it (the operator's defaults);
* ``observe.train``: the same job in ``power_limit_mode="observe"`` with b0 alone, which
  trains as Default does every day (b0 at the maximum limit): whatever it "saves" against
  Default is the runs' noise, and the report must say it is not distinguishable from 0.

Then ``zeus-airflow report`` on the store: each saving with the half-width of its 95 %
interval from the runs' own spread (``core/reports/records.saved_margin``). Figures are
replayed, not measured. Exits 1 when the observe-mode job's energy saving is called
distinguishable from 0, or the Zeus job's is not.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

from zeus_airflow.cli import main as cli
from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.traces import load_workload_trace
from zeus_airflow.core.common.units import within_noise
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining

GPU, WORKLOAD = "v100", "librispeech"


def run_jobs(url: str, days: int) -> None:
    trace = load_workload_trace(resolve_traces_dir(), GPU, WORKLOAD)
    w = trace.workload
    b0 = trace.default_batch_size
    assert b0 is not None
    jobs = {
        "demo.train": JobConfig(
            "demo.train",
            trace.batch_sizes,
            b0,
            w.target_metric,
            w.max_epochs,
            w.higher_is_better,
            eta=0.5,
        ),
        "observe.train": JobConfig(
            "observe.train",
            (b0,),
            b0,
            w.target_metric,
            w.max_epochs,
            w.higher_is_better,
            eta=0.5,
            profiler=ProfilerConfig(mode="observe"),
        ),
    }
    store = SQLStore(url, create_schema=True)
    quiet = logging.getLogger("zeus_airflow.bench.savings_intervals")
    quiet.setLevel(logging.ERROR)
    for config in jobs.values():
        gpu = ReplayGPU(trace)
        engine = Engine(store, gpu, config, seed=1, heartbeat_s=None, log=quiet)
        train = ReplayTraining(gpu, seed=1)
        for day in range(days):
            engine.run_recurrence(train, RecurrenceKey(f"day-{day:03d}", "bench", config.job_id))
    store.engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="12 days")
    args = parser.parse_args(argv)
    days = 12 if args.quick else args.days
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'zeus.db'}"
        run_jobs(url, days)
        cli(["report", "--db", url])
        captured = StringIO()
        with redirect_stdout(captured):
            cli(["report", "--db", url, "--format", "json"])
    jobs = {j["job_id"]: j for j in json.loads(captured.getvalue())["jobs"]}
    zeus, observe = jobs["demo.train"], jobs["observe.train"]
    noise = within_noise(observe["saved_energy_fraction"], observe["saved_energy_margin"])
    found = not within_noise(zeus["saved_energy_fraction"], zeus["saved_energy_margin"])
    print(
        f"\n{days} days, replayed: observe-mode job within noise: {noise}; "
        f"Zeus job distinguishable from 0: {found}"
    )
    return 0 if noise and found else 1


if __name__ == "__main__":
    sys.exit(main())
