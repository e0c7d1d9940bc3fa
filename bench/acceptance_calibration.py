"""Calibration of the noise acceptance test's workload (tests/acceptance_dags/regional_workload.py).

For each region and each batch size alone, runs the workload's real PyTorch training on the
simulated V100 through the real engine, profiler and an in-memory store, one recurrence per
day (the first one profiles the power limits, as in the test), while CPU-bound busy loops
compete for the cores, as the acceptance test's competing process and second task do. No setup
delay: this measures what a try's cost should be once setup is kept apart. Prints, per region
and size, epochs to target and the cost's mean, spread and range, then each region's cheapest
size and how much cheaper it is than the runner-up.

    PYTHONPATH=. .venv/bin/python bench/acceptance_calibration.py [--days 4] [--competitors 1]
    PYTHONPATH=. .venv/bin/python bench/acceptance_calibration.py --window [--size 64]

``--window`` runs one size (the cheapest, 64) over the test's whole catch-up window instead,
and prints its epochs day by day and its last five days' mean cost against the window's: the
test's criterion takes the second for the first, which holds only if the last days are not
harder than the rest.

Results are recorded in bench/acceptance_calibration.md.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "acceptance_dags"))

import regional_workload as workload  # noqa: E402

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig  # noqa: E402
from zeus_airflow.core.devices.spec import open_device, parse_device  # noqa: E402
from zeus_airflow.core.domain import RecurrenceKey  # noqa: E402
from zeus_airflow.core.store.sql import SQLStore  # noqa: E402
from zeus_airflow.core.train.engine import Engine  # noqa: E402

BUSY_LOOP = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end: pass\n"


@dataclass
class SizeResult:
    costs: list[float] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    missed: int = 0

    def mean(self) -> float:
        return statistics.fmean(self.costs) if self.costs else float("inf")


def measure(region: str, batch_size: int, days: list[str]) -> SizeResult:
    """``batch_size`` alone on ``region``'s data, one recurrence per day, a fresh job."""
    config = JobConfig(
        f"calibration.{region}.{batch_size}",
        (batch_size,),
        batch_size,
        workload.TARGET_ACCURACY,
        workload.MAX_EPOCHS,
        profiler=ProfilerConfig(warmup_steps=3, profile_steps=10),
    )
    device = open_device(parse_device("simulated:v100"))
    engine = Engine(SQLStore.in_memory(), device, config, seed=1, heartbeat_s=None)
    result = SizeResult()
    for day in days:
        if result.missed:  # a one-size job whose size failed has nothing left: start afresh
            engine = Engine(SQLStore.in_memory(), device, config, seed=1, heartbeat_s=None)
        outcome = engine.run_recurrence(
            lambda run, day=day: workload.train(run, region, day, setup_delay=0.0),
            RecurrenceKey(f"{region}-{day}"),
        ).final
        if outcome.outcome.reached_target:
            result.costs.append(outcome.outcome.cost)
            result.epochs.append(outcome.outcome.epochs)
        else:
            result.missed += 1
    return result


def window(size: int) -> None:
    """``size`` over the test's catch-up window, region by region."""
    days = workload.window_days()
    print(f"{'region':9} {'b':>5} {'epochs by day':>{len(days)}}  {'mean':>6} {'last 5':>6} ratio")
    for region in workload.REGIONS:
        r = measure(region, size, days)
        if r.missed:
            print(f"{region:9} {size:5d} missed the target on {r.missed} days")
            continue
        last = statistics.fmean(r.costs[-5:])
        print(
            f"{region:9} {size:5d} {''.join(map(str, r.epochs)):>{len(days)}}  "
            f"{r.mean():6.1f} {last:6.1f} {last / r.mean():5.2f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument(
        "--competitors", type=int, default=1, help="CPU-bound busy loops running meanwhile"
    )
    parser.add_argument(
        "--window", action="store_true", help="one size over the test's catch-up window, day by day"
    )
    parser.add_argument("--size", type=int, default=64, help="the size --window runs")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one region, two sizes, one day, no competing loop: that the "
        "script runs (the suite runs it)",
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    if args.quick:
        args.days, args.competitors = 1, 0
    regions = workload.REGIONS[:1] if args.quick else workload.REGIONS
    sizes = (64, workload.DEFAULT_BATCH_SIZE) if args.quick else workload.BATCH_SIZES
    days = [f"202601{day:02d}" for day in range(1, args.days + 1)]
    loops = [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(limit=1800)])
        for _ in range(args.competitors)
    ]
    try:
        if args.window:
            window(args.size)
            return
        print(
            f"{'region':9} {'b':>5} {'runs':>4} {'epochs':>12} {'mean cost':>10} "
            f"{'cv':>5} {'min':>8} {'max':>8}"
        )
        for region in regions:
            results = {b: measure(region, b, days) for b in sizes}
            for b, r in results.items():
                cv = statistics.pstdev(r.costs) / r.mean() if len(r.costs) > 1 else 0.0
                print(
                    f"{region:9} {b:5d} {len(r.costs):4d} {','.join(map(str, r.epochs)):>12} "
                    f"{r.mean():10.1f} {cv:5.2f} {min(r.costs, default=0):8.1f} "
                    f"{max(r.costs, default=0):8.1f}" + (f"  missed {r.missed}" if r.missed else "")
                )
            ranked = sorted(results, key=lambda b: results[b].mean())
            print(
                f"{region}: cheapest b={ranked[0]}, runner-up b={ranked[1]} at "
                f"{results[ranked[1]].mean() / results[ranked[0]].mean():.2f}x",
                flush=True,
            )
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


if __name__ == "__main__":
    main()
