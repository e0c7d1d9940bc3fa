"""A short job's first weeks: real PyTorch on the CPU, a simulated GPU, Zeus against Default.

    .venv/bin/python bench/short_job.py [--days 14] [--quick] [--train-samples N]
        [--power-limit-mode optimize|measure] --output bench/short_job

The example classifier (zeus_airflow/examples/classifier.py) retrained from scratch each day
on that day's sample, with so little data that a run is a few dozen steps (2,048 samples,
16 steps an epoch at the default batch size 128): the kind of job whose power profile never
finished before. Each day both jobs train on the same sample through the real engine: Zeus
(the operator's defaults) and Default (the default batch size at the maximum limit). Prints
and writes (<output>.md, <output>.csv) per day: what Zeus ran, whether its default size's
profile is complete, and the cumulative energy and cost against Default's. Energy is
**simulated** (the steps are real and timed, the power follows the V100's traced curve), so
the ratios carry the machine's timing noise. Exits 1 when Zeus's cumulative energy is above
Default's on the last day.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import cast

from zeus_airflow.cli.options import add_output_option, bench_output
from zeus_airflow.cli.output import write_csv
from zeus_airflow.core.common.config import (
    POWER_LIMIT_MODES,
    JobConfig,
    PowerLimitMode,
    ProfilerConfig,
)
from zeus_airflow.core.decide.policy import DefaultPolicy, ZeusPolicy
from zeus_airflow.core.devices.spec import open_device, parse_device
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.examples import classifier

SIZES = (16, 32, 64, 128, 256, 512)
B0 = 128
TRAIN_SAMPLES = 2048
"""A day's sample: 16 steps an epoch at the default size; 384 makes a job of about 30 steps a
run, 3,840 one of about 300 (docs/algorithm.md, "What a short job gets")."""


def task(train_samples: int) -> classifier.Task:
    return classifier.Task(
        centres_seed=0, spread=0.55, train_samples=train_samples, validation_samples=1024
    )


COLUMNS = [
    "day",
    "batch_size",
    "phase",
    "power_limit_w",
    "profile_unfinished",
    "steps",
    "zeus_energy_j",
    "default_energy_j",
    "cum_energy_ratio",
    "cum_cost_ratio",
    "budget_left_runs",
    "measurement",
]


def engine(policy: ZeusPolicy | DefaultPolicy, name: str, mode: str = "optimize") -> Engine:
    config = JobConfig(
        f"short.{name}",
        SIZES,
        B0,
        target_metric=0.85,
        max_epochs=10,
        profiler=ProfilerConfig(mode=cast(PowerLimitMode, mode)),
    )
    quiet = logging.getLogger(f"zeus_airflow.bench.{name}")
    quiet.setLevel(logging.ERROR)
    return Engine(
        SQLStore.in_memory(),
        open_device(parse_device("simulated:v100")),
        config,
        policy,
        seed=1,
        heartbeat_s=None,
        log=quiet,
    )


def train_on(day: int, job: classifier.Task) -> tuple[list[int], Callable[[TrainingRun], float]]:
    steps: list[int] = []

    def train(run: TrainingRun) -> float:
        accuracy = job.retrain(run, seed=1000 + day)
        steps.append(run.steps_trained)
        return accuracy

    return steps, train


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--quick", action="store_true", help="3 days: that the script runs")
    parser.add_argument(
        "--train-samples",
        type=int,
        default=TRAIN_SAMPLES,
        help=f"samples a day (default {TRAIN_SAMPLES:,}: about 160 steps a run; 384: about "
        "30; 3840: about 300)",
    )
    parser.add_argument(
        "--power-limit-mode",
        choices=POWER_LIMIT_MODES,
        default="optimize",
        help="Zeus's power_limit_mode (Default always trains at the GPUs' current limit, the "
        "maximum; measure: Zeus trains there too, as where limits cannot move)",
    )
    add_output_option(parser, "short_job")
    args = parser.parse_args()
    args.output = bench_output(args.output, args.quick, "short_job")
    import torch

    torch.set_num_threads(1)
    days = 3 if args.quick else args.days
    zeus = engine(ZeusPolicy(), "zeus", args.power_limit_mode)
    default = engine(DefaultPolicy(), "default")
    rows: list[dict[str, object]] = []
    totals = {"zeus": [0.0, 0.0], "default": [0.0, 0.0]}
    for day in range(days):
        results: dict[str, RecurrenceResult] = {}
        steps: list[int] = []
        order = [("default", default), ("zeus", zeus)]
        # Alternate who trains first: a run of a tenth of a second feels the caches.
        for name, eng in order if day % 2 == 0 else reversed(order):
            counted, train = train_on(day, task(args.train_samples))
            results[name] = eng.run_recurrence(train, RecurrenceKey(f"day-{day}"))
            totals[name][0] += results[name].energy_j
            totals[name][1] += results[name].cost
            if name == "zeus":
                steps = counted
        z = results["zeus"]
        rows.append(
            {
                "day": day + 1,
                "batch_size": z.batch_size,
                "phase": z.final.phase,
                "power_limit_w": z.power_limit_w,
                "profile_unfinished": z.profile_unfinished,
                "steps": sum(steps),
                "zeus_energy_j": round(z.energy_j, 1),
                "default_energy_j": round(results["default"].energy_j, 1),
                "cum_energy_ratio": round(totals["zeus"][0] / totals["default"][0], 4),
                "cum_cost_ratio": round(totals["zeus"][1] / totals["default"][1], 4),
                "budget_left_runs": None
                if z.budget_left_runs is None
                else round(z.budget_left_runs, 2),
                "measurement": z.measurement,
            }
        )
        print(f"day {day + 1}: {rows[-1]}", file=sys.stderr)
    write_csv(args.output.with_suffix(".csv"), COLUMNS, rows)
    lines = [
        "| day | Zeus ran (b, phase, W) | profile unfinished | steps | cumulative energy "
        "/ Default | cumulative cost / Default | budget left (Default runs) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['day']} | {r['batch_size']}, {r['phase']}, {r['power_limit_w']} W | "
        f"{'yes' if r['profile_unfinished'] else 'no'} | {r['steps']} | "
        f"{r['cum_energy_ratio']} | {r['cum_cost_ratio']} | {r['budget_left_runs']} |"
        for r in rows
    ]
    lines += [
        "",
        "Simulated energy (real PyTorch steps on the CPU, timed; the V100's traced "
        "power curve); Default: batch size 128 at the maximum limit, same daily data.",
    ]
    args.output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    last = float(str(rows[-1]["cum_energy_ratio"]))
    return 1 if last > 1.0 and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
