"""The paper's 12-cell sweep through the real engine, compared with upstream Zeus and Default.

    .venv/bin/python bench/simulate_sweep.py [--traces DIR] [--drift-detection on|off] \
        [--baseline OTHER.csv] --output bench/simulate

Runs `zeus-airflow simulate` on V100 and A40 x 6 workloads x seeds 1-5 x {zeus, default, grid}
(eta 0.5, beta 2), then writes <output>.csv (one row per run), <output>.png (regret and batch
size plots) and <output>.md (the comparison table), and prints the table. All figures are
replayed from the paper's traces. Exit status 1 if a target is missed (issue 2's, with issue
34's geometric mean to upstream <= 1.0 under the default budget; with ``--baseline``, the CSV
of another run of this sweep, e.g. with drift detection off, also: no Zeus-airflow cell's
regret more than 5 % above the baseline's).
"""

from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from statistics import mean

from zeus_airflow.cli.options import (
    add_output_option,
    add_traces_option,
    bench_output,
    traces_passed_on,
)

# Upstream Zeus 0.16's legacy simulator (`zeus._legacy`) run on the same traces, eta 0.5,
# beta 2, seeds 1-5: cumulative regret in 1e6 cost units, mean over the seeds.
UPSTREAM_REGRET = {
    ("v100", "librispeech"): 64.6,
    ("v100", "squad"): 2.9,
    ("v100", "sentiment140"): 4.7,
    ("v100", "imagenet"): 66.0,
    ("v100", "cifar100"): 0.6,
    ("v100", "movielens-1m"): 0.1,
    ("a40", "librispeech"): 69.2,
    ("a40", "squad"): 3.3,
    ("a40", "sentiment140"): 7.4,
    ("a40", "imagenet"): 107.5,
    ("a40", "cifar100"): 0.8,
    ("a40", "movielens-1m"): 0.1,
}
MAX_GEOMEAN = 1.0
"""Geometric mean over the 12 cells of the regret ratio to upstream, with the exploration
budget at its default (issue 34; issue 15's 0.6 is the target without a budget, which
bench/short_horizon.py checks)."""
MAX_OVER_BASELINE = 0.05
"""With --baseline: a cell's Zeus-airflow regret at most this much above the baseline's."""
GPUS = ("v100", "a40")
WORKLOADS = ("librispeech", "squad", "sentiment140", "imagenet", "cifar100", "movielens-1m")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_traces_option(parser)
    add_output_option(parser, "simulate")
    parser.add_argument(
        "--drift-detection",
        choices=["on", "off"],
        default=None,
        help="passed to `zeus-airflow simulate` (default: its default)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="CSV of another run of this sweep: compare Zeus-airflow's regret",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one cell, one seed, 20 recurrences, targets not checked: that the "
        "script runs (the suite runs it)",
    )
    args = parser.parse_args()
    args.output = bench_output(args.output, args.quick, "simulate")
    csv_path, png_path = args.output.with_suffix(".csv"), args.output.with_suffix(".png")
    traces = traces_passed_on(args.traces)
    gpus, workloads = (GPUS[:1], WORKLOADS[:1]) if args.quick else (GPUS, WORKLOADS)
    seeds = ["1"] if args.quick else ["1", "2", "3", "4", "5"]
    command = [
        sys.executable,
        "-m",
        "zeus_airflow.cli",
        "simulate",
        *traces,
        *[a for g in gpus for a in ("--gpu", g)],
        *[a for w in workloads for a in ("--workload", w)],
        *(["--recurrences", "20"] if args.quick else []),
        "--policy",
        "all",
        "--seeds",
        *seeds,
        "--eta",
        "0.5",
        "--beta",
        "2",
        "--output-csv",
        str(csv_path),
        "--plot",
        str(png_path),
        *(["--drift-detection", args.drift_detection] if args.drift_detection else []),
    ]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall_s = time.perf_counter() - started
    table, missed = compare(csv_path, wall_s, args.baseline)
    args.output.with_suffix(".md").write_text(table + "\n")
    print(table)
    return 1 if missed and not args.quick else 0


def read_runs(csv_path: Path) -> dict[tuple[str, str, str], list[dict[str, str]]]:
    runs: dict[tuple[str, str, str], list[dict[str, str]]] = defaultdict(list)
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            runs[(row["gpu"], row["workload"], row["policy"])].append(row)
    return runs


def compare(csv_path: Path, wall_s: float, baseline: Path | None = None) -> tuple[str, list[str]]:
    runs = read_runs(csv_path)
    base = read_runs(baseline) if baseline is not None else None

    def avg(key: tuple[str, str, str], column: str) -> float:
        return mean(float(r[column]) for r in runs[key])

    lines = [
        "| GPU | workload | b0 optimal | oracle (b, W) | last-5 E/Def | oracle E/Def | "
        "regret Zeus-airflow | upstream Zeus | Default | Grid | vs upstream |"
        + (" vs baseline |" if base else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if base else ""),
    ]
    missed: list[str] = []
    ratios, wins, worst = [], 0, -math.inf
    # The cells the CSV holds, in the table's order (--quick runs one).
    cells = [(g, w) for g in GPUS for w in WORKLOADS if (g, w, "zeus") in runs]
    for gpu, workload in cells:
        zeus, default, grid = ((gpu, workload, p) for p in ("zeus", "default", "grid"))
        regret = {
            p: avg(k, "cum_regret") / 1e6
            for p, k in (("zeus", zeus), ("default", default), ("grid", grid))
        }
        upstream = UPSTREAM_REGRET[(gpu, workload)]
        first = runs[zeus][0]
        b0_optimal = first["oracle_batch_size"] == runs[default][0]["final_batch_size"]
        last5, oracle = avg(zeus, "last5_energy_ratio"), avg(zeus, "oracle_energy_ratio")
        # Upstream's table is rounded to 0.1: compare at that precision.
        win = round(regret["zeus"], 1) <= upstream
        wins += win
        ratios.append(max(regret["zeus"], 1e-3) / upstream)
        if abs(last5 - oracle) > 0.03:
            missed.append(
                f"{gpu} {workload}: last-5 energy ratio {last5:.3f} vs oracle {oracle:.3f}"
            )
        if not b0_optimal and regret["zeus"] >= regret["default"]:
            missed.append(f"{gpu} {workload}: regret not below Default's")
        versus = ""
        if base is not None:
            before = mean(float(r["cum_regret"]) for r in base[zeus]) / 1e6
            change = regret["zeus"] / before - 1
            worst = max(worst, change)
            versus = f" {100 * change:+.1f} % |"
            if change > MAX_OVER_BASELINE:
                missed.append(
                    f"{gpu} {workload}: regret {100 * change:+.1f} % against the baseline's"
                )
        lines.append(
            f"| {gpu.upper()} | {workload} | {'yes' if b0_optimal else 'no'} | "
            f"{first['oracle_batch_size']}, {first['oracle_power_limit_w']} | {last5:.3f} | "
            f"{oracle:.3f} | {regret['zeus']:.2f} | {upstream:.1f} | "
            f"{regret['default']:.2f} | {regret['grid']:.2f} | "
            f"{regret['zeus'] / upstream:.2f} |{versus}"
        )
    seeds = " ".join(sorted({r["seed"] for v in runs.values() for r in v}, key=int))
    geomean = math.exp(mean(math.log(r) for r in ratios))
    if wins < 10:
        missed.append(f"at or below upstream in only {wins} of {len(cells)} cells")
    if geomean > MAX_GEOMEAN:
        missed.append(f"geometric-mean regret ratio to upstream {geomean:.2f} > {MAX_GEOMEAN}")
    lines += [
        "",
        f"Regret in 1e6 cost units (eta 0.5, beta 2, mean over seeds {seeds}); all figures "
        f"replayed from the paper's traces. At or below upstream in {wins} of {len(cells)} "
        f"cells; geometric-mean regret ratio to upstream {geomean:.2f}. Whole sweep "
        f"({len(cells)} cells x {len(seeds.split())} seeds x 3 policies, "
        f"{sum(len(v) for v in runs.values())} simulations): {wall_s:.1f} s wall.",
    ]
    if base is not None:
        lines[-1] += (
            f" Against the baseline ({baseline}): at most {100 * worst:+.1f} % in any cell."
        )
    if missed:
        lines += ["", "Targets missed:", *[f"- {m}" for m in missed]]
    return "\n".join(lines), missed


if __name__ == "__main__":
    sys.exit(main())
