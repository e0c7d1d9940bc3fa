"""``zeus-airflow simulate``: replay the paper's workloads through the real engine."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from statistics import mean

from zeus_airflow.cli import help_of
from zeus_airflow.cli.options import add_traces_option
from zeus_airflow.cli.output import check_writable, write_csv
from zeus_airflow.core.common.config import (
    DEFAULT_BETA,
    DEFAULT_DRIFT_DETECTION,
    DEFAULT_ETA,
    DEFAULT_EXPLORATION_BUDGET,
    POWER_LIMIT_MODES,
    ConfigError,
    check_int,
    declared_default,
)
from zeus_airflow.core.common.extras import check_installed
from zeus_airflow.core.common.traces import WORKLOADS, load_workload_trace
from zeus_airflow.core.decide.policy import POLICIES
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.sim.simulator import SimulationResult, SimulationSpec, job_config, simulate

CSV_COLUMNS = [
    "policy",
    "gpu",
    "workload",
    "seed",
    "recurrences",
    "last5_energy_ratio",
    "last5_time_ratio",
    "oracle_energy_ratio",
    "oracle_time_ratio",
    "cum_energy_j",
    "cum_time_s",
    "cum_regret",
    "wall_s",
    "oracle_batch_size",
    "oracle_power_limit_w",
    "final_batch_size",
    "final_power_limit_w",
    "measurement",
]


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "simulate",
        help=help_of("simulate"),
        description="Replay the Zeus paper's traces through the real engine, profiler and store "
        "on a virtual GPU, with the Default and Grid-search baselines. All figures "
        "are replayed, not measured.",
    )
    add_traces_option(parser)
    parser.add_argument(
        "--gpu", required=True, action="append", help="GPU trace name (e.g. v100, a40); repeatable"
    )
    parser.add_argument(
        "--workload",
        required=True,
        action="append",
        help=f"workload; repeatable; one of {', '.join(WORKLOADS)}",
    )
    _policy_options(parser)
    parser.add_argument("--output-csv", required=True, type=Path)
    parser.add_argument("--plot", type=Path, default=None, help="PNG: regret and batch sizes")
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="processes to run simulations in (default: all cores)",
    )
    parser.set_defaults(handler=run)


def _policy_options(parser: argparse.ArgumentParser) -> None:
    """The options of the simulated jobs' policy, defaulting to the operator's."""
    parser.add_argument("--policy", default="all", choices=[*POLICIES, "all"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    _add_job_options(parser)
    parser.add_argument(
        "--recurrences",
        type=int,
        default=None,
        help="default: 2 x |batch sizes| x |power limits| (paper)",
    )


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    """The replayed job's own settings, each defaulting to the operator's."""
    parser.add_argument("--eta", type=float, default=DEFAULT_ETA)
    parser.add_argument("--beta", type=float, default=DEFAULT_BETA)
    parser.add_argument(
        "--window", type=int, default=None, help="posterior window per batch size (default: none)"
    )
    parser.add_argument(
        "--drift-detection",
        choices=["on", "off"],
        default="on" if DEFAULT_DRIFT_DETECTION else "off",
        help="look for change points in each batch size's costs "
        "(docs/drift.md; default: the operator's, "
        f"{'on' if DEFAULT_DRIFT_DETECTION else 'off'})",
    )
    parser.add_argument(
        "--exploration-budget",
        type=budget_argument,
        default=DEFAULT_EXPLORATION_BUDGET,
        metavar="FRACTION|none",
        help="the job's cost stays within (1 + FRACTION) x Default's over the "
        "same runs; 'none' explores as the paper does (default: the "
        f"operator's, {DEFAULT_EXPLORATION_BUDGET})",
    )
    parser.add_argument(
        "--power-limit-mode",
        choices=POWER_LIMIT_MODES,
        default=declared_default("power_limit_mode"),
        help="optimize: profile and train at the best limit; observe: profile, train at the "
        "maximum; measure: never change a limit, as where limits cannot move (no root, MIG, "
        f"a shared GPU; default: the operator's, {declared_default('power_limit_mode')})",
    )


def run(args: argparse.Namespace) -> int:
    specs = build_specs(args)
    for name, path in (("output_csv", args.output_csv), ("plot", args.plot)):
        if path is not None:
            check_writable(name, path)
    if args.plot is not None:  # before the sweep, not after minutes of it
        check_installed("matplotlib", "simulate --plot")
    results = run_all(specs, args.jobs)
    write_csv(args.output_csv, CSV_COLUMNS, (r.row() for r in results))
    print(format_table(results))
    print(
        f"\nwrote {args.output_csv} ({len(results)} rows; all energy and time figures are "
        "replayed from the paper's traces)"
    )
    if args.plot is not None:
        from zeus_airflow.sim.plots import plot_simulation

        plot_simulation(results, args.plot)
        print(f"wrote {args.plot}")
    return 0


def budget_argument(text: str) -> float | None:
    """``--exploration-budget``: a fraction, or ``none``."""
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"exploration budget {text!r} is invalid: expected a fraction >= 0 (e.g. 0.1) or 'none'"
        ) from None


def build_specs(args: argparse.Namespace) -> list[SimulationSpec]:
    """Validate every argument before any simulation starts."""
    if args.recurrences is not None:  # the store numbers runs in 32-bit integer columns
        check_int("recurrences", args.recurrences, minimum=1)
    if not args.seeds:
        raise ConfigError("seeds=[] is invalid: expected at least one integer seed")
    for seed in args.seeds:  # numpy refuses negative seeds, deep inside a simulation
        check_int("seeds", seed, minimum=0)
    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    traces = resolve_traces_dir(args.traces)
    job = {
        "eta": args.eta,
        "beta": args.beta,
        "window_size": args.window,
        "drift_detection": args.drift_detection == "on",
        "exploration_budget": args.exploration_budget,
        "power_limit_mode": args.power_limit_mode,
    }
    specs = []
    for gpu in dict.fromkeys(args.gpu):
        for workload in dict.fromkeys(args.workload):
            trace = load_workload_trace(traces, gpu, workload)  # raises naming gpu/workload
            for policy in policies:
                for seed in args.seeds:
                    spec = SimulationSpec(
                        policy,
                        gpu,
                        workload,
                        seed,
                        str(traces),
                        recurrences=args.recurrences,
                        job=job,
                    )
                    job_config(trace, spec)  # raises naming eta/beta/window_size
                    specs.append(spec)
    return specs


def run_all(specs: Sequence[SimulationSpec], jobs: int) -> list[SimulationResult]:
    """Run simulations in parallel, printing progress to stderr as each one ends."""
    started = time.perf_counter()
    results: list[SimulationResult] = []
    done = 0

    def report(result: SimulationResult) -> None:
        nonlocal done
        done += 1
        s = result.spec
        print(
            f"[{done:3d}/{len(specs)}] {s.policy:7s} {s.gpu:5s} {s.workload:13s} seed {s.seed}"
            f"  {result.recurrences} recurrences in {result.wall_s:5.2f} s "
            f"(elapsed {time.perf_counter() - started:6.1f} s)",
            file=sys.stderr,
            flush=True,
        )

    if jobs <= 1 or len(specs) == 1:
        for spec in specs:
            results.append(simulate(spec))
            report(results[-1])
    else:
        # Longest simulations first keeps both cores busy to the end.
        ordered = sorted(specs, key=_expected_work, reverse=True)
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(simulate, spec) for spec in ordered]
            for future in as_completed(futures):
                results.append(future.result())
                report(results[-1])
    order = {spec: i for i, spec in enumerate(specs)}
    return sorted(results, key=lambda r: order[r.spec])


def _expected_work(spec: SimulationSpec) -> float:
    trace = load_workload_trace(Path(spec.traces_dir), spec.gpu, spec.workload)
    return len(trace.batch_sizes) * len(trace.power_limits_w) * trace.workload.max_epochs


def format_table(results: Sequence[SimulationResult]) -> str:
    """Mean over seeds per (gpu, workload, policy); regret in 1e6 cost units."""
    groups: dict[tuple[str, str, str], list[dict[str, object]]] = defaultdict(list)
    for result in results:
        s = result.spec
        groups[(s.gpu, s.workload, s.policy)].append(result.row())
    header = (
        f"{'gpu':5s} {'workload':13s} {'policy':7s} {'seeds':>5s} {'last5 E/Def':>11s} "
        f"{'oracle E/Def':>12s} {'last5 T/Def':>11s} {'cum regret 1e6':>14s} "
        f"{'final (b, W)':>13s} {'oracle (b, W)':>13s}"
    )
    lines = ["All figures replayed from the paper's traces.", header, "-" * len(header)]
    for (gpu, workload, policy), rows in groups.items():

        def avg(column: str, rows: list[dict[str, object]] = rows) -> float:
            return mean(float(str(r[column])) for r in rows)

        first = rows[0]
        lines.append(
            f"{gpu:5s} {workload:13s} {policy:7s} {len(rows):5d} "
            f"{avg('last5_energy_ratio'):11.3f} {avg('oracle_energy_ratio'):12.3f} "
            f"{avg('last5_time_ratio'):11.3f} {avg('cum_regret') / 1e6:14.2f} "
            f"{first['final_batch_size']!s:>7s}, {first['final_power_limit_w']!s:>4s} "
            f"{first['oracle_batch_size']!s:>7s}, {first['oracle_power_limit_w']!s:>4s}"
        )
    return "\n".join(lines)
