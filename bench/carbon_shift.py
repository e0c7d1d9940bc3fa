"""How much does a carbon-aware start save, alone, with Zeus, and with Zeus's learned duration?

    .venv/bin/python bench/carbon_shift.py --output bench/carbon_shift
    .venv/bin/python bench/carbon_shift.py --intensity-csv export.csv --zone DE \
        --output bench/carbon_shift_de        # a real export (ours or Electricity Maps')

Sixty daily runs of V100 sentiment140 (Default: 3.4 h) replayed from the paper's traces,
scheduled at 00:00 UTC, on an hourly intensity trace: synthetic with a solar-heavy grid's
daily shape (zeus_airflow/sim/carbon.py, ``synthetic_intensity``) unless a real one is given.
Two deadlines: 20 h (room to reach the midday dip) and 14 h (a run that starts at the dip
with a guessed 2 h duration finishes late). Writes <output>.md (the tables), <output>.csv
(one row per arm and day) and <output>.png (the 20 h case). Every figure is replayed.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import replace
from pathlib import Path

from zeus_airflow.cli.options import add_output_option, bench_output
from zeus_airflow.core.carbon.csvtrace import CsvTrace
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.sim.carbon import (
    ARMS,
    CarbonExperimentResult,
    CarbonExperimentSpec,
    run_carbon_experiment,
    table,
)
from zeus_airflow.sim.carbon_plot import plot_carbon

DEADLINES_H = (20.0, 14.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_option(parser, "carbon_shift")
    parser.add_argument("--gpu", default="v100")
    parser.add_argument("--workload", default="sentiment140")
    parser.add_argument(
        "--guess-h",
        type=float,
        default=2.0,
        help="the duration the user guesses for the carbon-aware start alone",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--intensity-csv",
        type=Path,
        default=None,
        help="an hourly trace (ours or an Electricity Maps export) of at least "
        "61 days; default: the synthetic trace",
    )
    parser.add_argument("--zone", default=None, help="the zone to read from --intensity-csv")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="5 days instead of 60: that the script runs (the suite runs it)",
    )
    args = parser.parse_args()
    args.output = bench_output(args.output, args.quick, "carbon_shift")
    grid, label = None, ""
    if args.intensity_csv:
        loaded = CsvTrace.load(args.intensity_csv)
        zone = args.zone or next(iter(loaded.zones))
        grid = list(loaded.zones.get(zone, loaded.zones.get("*", ())))
        label = f"{args.intensity_csv.name}, zone {zone} (real)"
    spec = CarbonExperimentSpec(
        args.gpu,
        args.workload,
        str(resolve_traces_dir()),
        seed=args.seed,
        guess_s=args.guess_h * 3600,
        **({"days": 5} if args.quick else {}),
    )
    results: list[CarbonExperimentResult] = []
    started = time.perf_counter()
    for deadline in DEADLINES_H:
        print(f"deadline {deadline:g} h: {spec.days} days x {len(ARMS)} arms...", file=sys.stderr)
        results.append(run_carbon_experiment(replace(spec, deadline_h=deadline), grid, label))
    wall_s = time.perf_counter() - started
    write_csv(results, args.output.with_suffix(".csv"))
    plot_carbon(results[0], args.output.with_suffix(".png"))
    report = render(results, wall_s)
    args.output.with_suffix(".md").write_text(report + "\n")
    print(report)
    return 0


def write_csv(results: list[CarbonExperimentResult], path: Path) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(
            [
                "deadline_h",
                "arm",
                "day",
                "emissions_g",
                "energy_j",
                "start_delay_s",
                "measurement",
                "shift_saved_g",
            ]
        )
        for result in results:
            for arm in ARMS:
                r = result.arms[arm]
                for day, (g, e, d, shifted) in enumerate(
                    zip(r.emissions_g, r.energy_j, r.delay_s, r.shift_saved_g, strict=True)
                ):
                    out.writerow(
                        [
                            result.spec.deadline_h,
                            arm,
                            day,
                            round(g, 2),
                            round(e, 1),
                            round(d),
                            "replayed",
                            round(shifted, 2),
                        ]
                    )


def render(results: list[CarbonExperimentResult], wall_s: float) -> str:
    spec = results[0].spec
    lines = [
        f"# Carbon-aware start, replayed: {spec.gpu.upper()} {spec.workload}, "
        f"{spec.days} daily runs",
        "",
        f"Intensity trace: {results[0].trace_label}. Runs scheduled at "
        f"{spec.schedule_hour:02d}:00 UTC; the carbon-aware starts plan on a forecast "
        f"with {100 * spec.forecast_error:g} % hourly error; the user's guessed duration "
        f"is {spec.guess_s / 3600:g} h. Energy and time are **replayed** from the paper's "
        "traces (not measured); emissions are the replayed energy times the trace's "
        "intensity over each run's replayed span.",
        "",
    ]
    for result in results:
        lines += [
            f"## Deadline {result.spec.deadline_h:g} h after the schedule",
            "",
            table(result),
            "",
        ]
    lines.append(f"Wall time {wall_s:.1f} s. Plot (20 h deadline): carbon_shift.png.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
