"""What a team sees in its first weeks: the job's cumulative cost against Default's, run by run.

    .venv/bin/python bench/short_horizon.py [--traces DIR] [--quick] --output bench/short_horizon

For each of the paper's 12 cells (V100 and A40 x 6 workloads) and seeds 1-5, replays the job
through the real engine with Zeus (the exploration budget on, at the operator's default),
with Zeus without a budget (``exploration_budget=None``, the paper's unconstrained
exploration), and with Default (the default batch size at the maximum limit). The replay
draws each recurrence's data from (seed, recurrence, batch size), so Default's run of a
recurrence trains on the very data Zeus's run of it did: "what the same DAG would have cost
without Zeus". For each path it reports the highest cumulative cost ratio to Default over all
recurrences (the paper's horizon, 2 x |B| x |P|), the ratio at runs 7 and 14, and the
break-even run (the first from which the ratio stays at or below 1); then, per cell, the
regret against upstream Zeus and the last-5 energy against the oracle, as bench/simulate_sweep.py
reports them. Writes <output>.csv (one row per path) and <output>.md, prints the table, exits
1 when a target is missed. All figures are replayed from the paper's traces.

``--quick``: one cell, one seed, 20 recurrences (the suite runs it so the script cannot rot).
"""

from __future__ import annotations

import argparse
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from statistics import mean

from zeus_airflow.cli.options import add_output_option, add_traces_option, bench_output
from zeus_airflow.cli.output import write_csv
from zeus_airflow.core.config import DEFAULT_EXPLORATION_BUDGET
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.sim.simulator import SimulationResult, SimulationSpec, simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simulate_sweep import GPUS, UPSTREAM_REGRET, WORKLOADS

SEEDS = (1, 2, 3, 4, 5)
ARMS = {"budget": DEFAULT_EXPLORATION_BUDGET, "no budget": None}
"""The Zeus paths compared by default: the exploration budget as the operator sets it, and
none (``--budgets`` compares others, e.g. ``0.1 0.3 none``)."""
MAX_RATIO = 1.0 + DEFAULT_EXPLORATION_BUDGET
MAX_GEOMEAN = 0.7
MAX_LAST5_GAP = 0.03
COLUMNS = [
    "arm",
    "gpu",
    "workload",
    "seed",
    "recurrences",
    "max_ratio",
    "max_ratio_run",
    "ratio_at_7",
    "ratio_at_14",
    "break_even_run",
    "final_ratio",
    "cum_regret",
    "last5_energy_ratio",
    "oracle_energy_ratio",
    "measurement",
]


@dataclass(frozen=True)
class Path_:
    """One Zeus path against Default over the same recurrences."""

    arm: str
    zeus: SimulationResult
    default: SimulationResult

    @property
    def ratios(self) -> list[float]:
        """Cumulative cost over Default's, after each recurrence."""
        return [
            z / d
            for z, d in zip(accumulate(self.zeus.cost), accumulate(self.default.cost), strict=True)
        ]

    def row(self) -> dict[str, object]:
        ratios, spec = self.ratios, self.zeus.spec
        worst = max(range(len(ratios)), key=lambda i: ratios[i])
        above = [i for i, r in enumerate(ratios) if r > 1.0]
        zeus_row = self.zeus.row()
        return {
            "arm": self.arm,
            "gpu": spec.gpu,
            "workload": spec.workload,
            "seed": spec.seed,
            "recurrences": len(ratios),
            "max_ratio": round(ratios[worst], 4),
            "max_ratio_run": worst + 1,
            "ratio_at_7": round(ratios[min(6, len(ratios) - 1)], 4),
            "ratio_at_14": round(ratios[min(13, len(ratios) - 1)], 4),
            "break_even_run": (above[-1] + 2 if above else 1) if ratios[-1] <= 1.0 else "",
            "final_ratio": round(ratios[-1], 4),
            "cum_regret": zeus_row["cum_regret"],
            "last5_energy_ratio": zeus_row["last5_energy_ratio"],
            "oracle_energy_ratio": zeus_row["oracle_energy_ratio"],
            "measurement": "replayed",
        }


def run_cell(
    args: tuple[str, str, int, str, int | None, dict[str, float | None]],
) -> list[dict[str, object]]:
    gpu, workload, seed, traces, recurrences, arms = args
    default = simulate(
        SimulationSpec("default", gpu, workload, seed, traces, recurrences=recurrences)
    )
    return [
        Path_(
            arm,
            simulate(
                SimulationSpec(
                    "zeus",
                    gpu,
                    workload,
                    seed,
                    traces,
                    recurrences=recurrences,
                    exploration_budget=budget,
                )
            ),
            default,
        ).row()
        for arm, budget in arms.items()
    ]


def num(row: dict[str, object], column: str) -> float:
    return float(str(row[column]))


def summarise(
    rows: list[dict[str, object]], arms: dict[str, float | None]
) -> tuple[list[str], list[str]]:
    """The markdown table and the targets missed."""
    lines = [
        "| arm | paths | ever above 1.10 x Default | worst max ratio | at or below Default "
        "at run 7 | median ratio at 7 / 14 | break-even by run 7 | geomean regret / "
        "upstream | cells with last-5 within 0.03 of oracle |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    missed: list[str] = []
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        above = [r for r in mine if num(r, "max_ratio") > MAX_RATIO + 1e-9]
        at7 = [r for r in mine if num(r, "ratio_at_7") <= 1.0]
        even7 = [r for r in mine if r["break_even_run"] != "" and num(r, "break_even_run") <= 7]
        worst = max(mine, key=lambda r: num(r, "max_ratio"))
        cells = sorted({(str(r["gpu"]), str(r["workload"])) for r in mine})
        ratios, close = [], 0
        for gpu, workload in cells:
            cell = [r for r in mine if (r["gpu"], r["workload"]) == (gpu, workload)]
            regret = mean(num(r, "cum_regret") for r in cell) / 1e6
            ratios.append(max(regret, 1e-3) / UPSTREAM_REGRET[(gpu, workload)])
            last5 = mean(num(r, "last5_energy_ratio") for r in cell)
            oracle = mean(num(r, "oracle_energy_ratio") for r in cell)
            if abs(last5 - oracle) <= MAX_LAST5_GAP:
                close += 1
            elif arm == "budget":
                missed.append(f"{gpu} {workload}: last-5 energy {last5:.3f} vs oracle {oracle:.3f}")
        geomean = math.exp(mean(math.log(r) for r in ratios))
        median7 = sorted(num(r, "ratio_at_7") for r in mine)[len(mine) // 2]
        median14 = sorted(num(r, "ratio_at_14") for r in mine)[len(mine) // 2]
        lines.append(
            f"| {arm} | {len(mine)} | {len(above)} | {num(worst, 'max_ratio'):.3f} "
            f"({worst['gpu']} {worst['workload']} seed {worst['seed']}, run "
            f"{worst['max_ratio_run']}) | {len(at7)} | {median7:.3f} / {median14:.3f} | "
            f"{len(even7)} | {geomean:.2f} | {close} of {len(cells)} |"
        )
        if arm == "budget":
            missed += [
                f"{r['gpu']} {r['workload']} seed {r['seed']}: {r['max_ratio']} x "
                f"Default's cost at run {r['max_ratio_run']}"
                for r in above
            ]
            missed += [
                f"{r['gpu']} {r['workload']} seed {r['seed']}: {r['ratio_at_7']} x "
                "Default's cost at run 7"
                for r in mine
                if r not in at7
            ]
            if geomean > MAX_GEOMEAN:
                missed.append(
                    f"geometric-mean regret ratio to upstream {geomean:.2f} > {MAX_GEOMEAN}"
                )
    return lines, missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_traces_option(parser)
    add_output_option(parser, "short_horizon")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one cell, one seed, 20 recurrences: that the script still runs",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--budgets",
        nargs="+",
        default=None,
        metavar="FRACTION|none",
        help="exploration budgets to compare (default: the operator's, and none)",
    )
    args = parser.parse_args()
    args.output = bench_output(args.output, args.quick, "short_horizon")
    arms = (
        ARMS
        if args.budgets is None
        else {
            ("no budget" if b.lower() == "none" else f"budget {b}"): (
                None if b.lower() == "none" else float(b)
            )
            for b in args.budgets
        }
    )
    traces = str(resolve_traces_dir(args.traces))
    if args.quick:
        cells = [("v100", "imagenet", 1, traces, 20, arms)]
    else:
        cells = [(g, w, s, traces, None, arms) for g in GPUS for w in WORKLOADS for s in SEEDS]
    rows: list[dict[str, object]] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done, cell_rows in enumerate(pool.map(run_cell, cells), start=1):
            rows += cell_rows
            print(
                f"[{done}/{len(cells)}] {cell_rows[0]['gpu']} {cell_rows[0]['workload']} "
                f"seed {cell_rows[0]['seed']}",
                file=sys.stderr,
            )
    write_csv(args.output.with_suffix(".csv"), COLUMNS, rows)
    lines, missed = summarise(rows, arms)
    lines += [
        "",
        "Cumulative cost over Default's (the default batch size at the maximum power "
        "limit) on the same recurrences' data; eta 0.5, beta 2; all figures replayed from "
        "the paper's traces.",
    ]
    if missed and not args.quick:
        lines += ["", "Targets missed:", *[f"- {m}" for m in missed]]
    args.output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
