"""``zeus-airflow drift-experiment``: does a windowed posterior adapt to data drift faster?"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from statistics import mean, median

from zeus_airflow.cli import help_of
from zeus_airflow.cli.options import add_traces_option
from zeus_airflow.cli.output import check_writable, write_csv
from zeus_airflow.core.common.config import DEFAULT_BETA, DEFAULT_ETA, ConfigError, check_int
from zeus_airflow.core.common.extras import check_installed
from zeus_airflow.core.common.traces import WORKLOADS, load_workload_trace
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.sim.drift import (
    ADAPT_HORIZON,
    ADAPT_SHARE,
    DEFAULT_BATCH_SCALE,
    DEFAULT_DIFFICULTY,
    Drift,
    DriftResult,
    DriftSpec,
    optima,
    run_drift,
)
from zeus_airflow.sim.simulator import job_config

SUMMARY_COLUMNS = [
    "window",
    "seed",
    "gpu",
    "workload",
    "switch_at",
    "recurrences",
    "optimum_before",
    "optimum_after",
    "indistinguishable_after",
    "survivors_at_switch",
    "can_adapt",
    "adaptation_delay",
    "near_adaptation_delay",
    "regret_after_switch",
    "regret_before_switch",
    "wall_s",
    "measurement",
]
RECURRENCE_COLUMNS = [
    "window",
    "seed",
    "recurrence",
    "after_switch",
    "batch_size",
    "power_limit_w",
    "energy_j",
    "time_s",
    "cost",
    "regret",
    "measurement",
]


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "drift-experiment",
        help=help_of("drift-experiment"),
        description="Run the real engine on the replay GPU; at --switch-at the workload's "
        "epochs-to-target curve drifts (batch size b then needs difficulty x the "
        "epochs batch size b/batch-scale needed), so the optimal batch size moves. "
        "Compares posterior windows over seeds. All figures are replayed.",
    )
    add_traces_option(parser)
    parser.add_argument("--gpu", default="v100")
    parser.add_argument("--workload", default="cifar100", help=f"one of {', '.join(WORKLOADS)}")
    parser.add_argument(
        "--switch-at", type=int, default=80, help="first recurrence after the drift (0-based)"
    )
    parser.add_argument("--recurrences", type=int, default=200)
    parser.add_argument("--batch-scale", type=float, default=DEFAULT_BATCH_SCALE)
    parser.add_argument("--difficulty", type=float, default=DEFAULT_DIFFICULTY)
    parser.add_argument(
        "--windows",
        nargs="+",
        default=["10", "none"],
        help="posterior modes to compare: a window size, 'none' (no window) "
        "or 'detect' (drift detection, no window)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 21)))
    parser.add_argument("--eta", type=float, default=DEFAULT_ETA)
    parser.add_argument("--beta", type=float, default=DEFAULT_BETA)
    parser.add_argument("--output-csv", required=True, type=Path, help="one row per (window, seed)")
    parser.add_argument(
        "--recurrences-csv", type=Path, default=None, help="one row per (window, seed, recurrence)"
    )
    parser.add_argument("--plot", type=Path, default=None, help="PNG after the paper's Fig. 10")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    specs = build_specs(args)
    for name, path in (
        ("output_csv", args.output_csv),
        ("recurrences_csv", args.recurrences_csv),
        ("plot", args.plot),
    ):
        if path is not None:
            check_writable(name, path)
    if args.plot is not None:  # before the experiment, not after minutes of it
        check_installed("matplotlib", "drift-experiment --plot")
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run_drift, specs))
    else:
        results = [run_drift(spec) for spec in specs]
    write_summary(args.output_csv, results)
    if args.recurrences_csv is not None:
        write_recurrences(args.recurrences_csv, results)
    print(format_table(results))
    print(
        f"\nwrote {args.output_csv}; all figures replayed from the paper's traces", file=sys.stderr
    )
    if args.plot is not None:
        from zeus_airflow.sim.drift_plot import plot_drift

        plot_drift(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def build_specs(args: argparse.Namespace) -> list[DriftSpec]:
    """Validate every argument before any simulation starts."""
    if not args.seeds:
        raise ConfigError("seeds=[] is invalid: expected at least one integer seed")
    for seed in args.seeds:  # numpy refuses negative seeds, deep inside a simulation
        check_int("seeds", seed, minimum=0)
    modes = [_mode(text) for text in dict.fromkeys(args.windows)]
    traces = resolve_traces_dir(args.traces)
    trace = load_workload_trace(traces, args.gpu, args.workload)  # names gpu/workload
    drift = Drift(args.batch_scale, args.difficulty)
    specs = [
        DriftSpec(
            gpu=args.gpu,
            workload=args.workload,
            traces_dir=str(traces),
            seed=seed,
            switch_at=args.switch_at,
            recurrences=args.recurrences,
            drift=drift,
            job={
                "window_size": window,
                "eta": args.eta,
                "beta": args.beta,
                "drift_detection": detect,
            },
        )
        for window, detect in modes
        for seed in dict.fromkeys(args.seeds)
    ]
    job_config(trace, specs[0].simulation_spec())  # raises naming eta/beta
    optima(specs[0])  # names batch_scale/difficulty when the optimum would not move
    return specs


def _mode(text: str) -> tuple[int | None, bool]:
    """(window, drift detection) for one ``--windows`` entry."""
    if text.lower() in ("none", "detect"):
        return None, text.lower() == "detect"
    try:
        window = int(text)
    except ValueError:
        window = 0
    if window < 1:
        raise ConfigError(
            f"windows={text!r} is invalid: expected integers >= 1, 'none' or 'detect'"
        )
    return window, False


def mode_name(spec: DriftSpec) -> str:
    """The ``--windows`` entry that gives this spec: its CSV ``window`` column."""
    window = spec.parameter("window_size")
    if spec.parameter("drift_detection"):
        return "detect" if window is None else f"detect-{window}"
    return "none" if window is None else str(window)


def summary_row(result: DriftResult) -> dict[str, object]:
    spec, switch = result.spec, result.spec.switch_at
    return {
        "window": mode_name(spec),
        "seed": spec.seed,
        "gpu": spec.gpu,
        "workload": spec.workload,
        "switch_at": switch,
        "recurrences": spec.recurrences,
        "optimum_before": result.optima.before.batch_size,
        "optimum_after": result.optima.after.batch_size,
        "survivors_at_switch": " ".join(map(str, result.survivors_at_switch)),
        "can_adapt": result.can_adapt,
        "indistinguishable_after": " ".join(map(str, result.optima.indistinguishable_after)),
        "adaptation_delay": "" if result.adaptation_delay is None else result.adaptation_delay,
        "near_adaptation_delay": ""
        if result.near_adaptation_delay is None
        else result.near_adaptation_delay,
        "regret_after_switch": round(result.regret_after_switch, 1),
        "regret_before_switch": round(sum(result.regret[:switch]), 1),
        "wall_s": round(result.wall_s, 3),
        "measurement": "replayed",
    }


def write_summary(path: Path, results: Sequence[DriftResult]) -> None:
    write_csv(path, SUMMARY_COLUMNS, [summary_row(r) for r in results])


def write_recurrences(path: Path, results: Sequence[DriftResult]) -> None:
    rows: list[dict[str, object]] = []
    for r in results:
        for i, regret in enumerate(r.regret):
            rows.append(
                {
                    "window": mode_name(r.spec),
                    "seed": r.spec.seed,
                    "recurrence": i,
                    "after_switch": i >= r.spec.switch_at,
                    "batch_size": r.batch_size[i],
                    "power_limit_w": r.power_limit_w[i],
                    "energy_j": round(r.energy_j[i], 1),
                    "time_s": round(r.time_s[i], 2),
                    "cost": round(r.cost[i], 1),
                    "regret": round(regret, 1),
                    "measurement": "replayed",
                }
            )
    write_csv(path, RECURRENCE_COLUMNS, rows)


def format_table(results: Sequence[DriftResult]) -> str:
    """Per window: adaptation delay over the seeds whose new optimum survived pruning; regret
    after the switch (1e6 cost units) over all seeds and over those; and that regret as a
    share of what the new optimum would have cost over the same recurrences."""
    spec, optimum = results[0].spec, results[0].optima
    after_cost = (spec.recurrences - spec.switch_at) * optimum.after.cost
    labels = list(dict.fromkeys(r.spec.label for r in results))
    header = (
        f"{'window':10s} {'seeds':>5s} {'adaptable':>9s} {'adapted':>7s} "
        f"{'median delay':>12s} {'mean delay':>10s} {'regret all':>10s} "
        f"{'regret adaptable':>16s} {'extra cost':>10s}"
    )
    lines = [
        f"{spec.gpu.upper()} {spec.workload}: optimum {optimum.before.batch_size} -> "
        f"{optimum.after.batch_size} at recurrence {spec.switch_at} of {spec.recurrences} "
        f"(batch_scale {spec.drift.batch_scale}, difficulty {spec.drift.difficulty}); "
        f"delay = recurrences until >= {ADAPT_SHARE:.0%} of {ADAPT_HORIZON} consecutive "
        "runs pick the new optimum; regret after the switch in 1e6 cost units; extra "
        "cost = that regret over the new optimum's expected cost (adaptable seeds). "
        "All figures replayed.",
        header,
        "-" * len(header),
    ]
    for label in labels:
        runs = [r for r in results if r.spec.label == label]
        able = [r for r in runs if r.can_adapt]
        delays = [r.adaptation_delay for r in able if r.adaptation_delay is not None]
        regret_able = mean(r.regret_after_switch for r in able) if able else None
        lines.append(
            f"{label:10s} {len(runs):5d} {len(able):9d} {len(delays):7d} "
            f"{_fmt(median(delays) if delays else None):>12s} "
            f"{_fmt(mean(delays) if delays else None):>10s} "
            f"{mean(r.regret_after_switch for r in runs) / 1e6:10.3f} "
            f"{_fmt(regret_able / 1e6 if regret_able is not None else None, 3):>16s} "
            f"{_fmt(100 * regret_able / after_cost if regret_able is not None else None):>9s}%"
        )
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
