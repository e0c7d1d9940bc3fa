"""``zeus-airflow capriccio generate | slice | run``: the paper's drifting tweet corpus (§6.4).

- ``generate``: write the synthetic drifting corpus (Sentiment140 format);
- ``slice``: cut a Sentiment140-format corpus into daily slices with their train/val split;
- ``run``: retrain on every slice through the real engine: real PyTorch training on this
  CPU, power and slowdown from the simulated GPU. Figures are labelled simulated.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeus_airflow.capriccio.corpus import Tweets, read_tweets
from zeus_airflow.capriccio.generator import CorpusSpec, generate, write_corpus
from zeus_airflow.capriccio.job import CapriccioJob
from zeus_airflow.capriccio.slicing import (
    DEFAULT_SPLIT_SEED,
    DEMO_SLICE_SIZE,
    DEMO_VAL_SIZE,
    SliceSizes,
    plan_slices,
    slice_for_day,
    write_slice,
)
from zeus_airflow.cli import help_of
from zeus_airflow.cli.options import add_traces_option
from zeus_airflow.cli.output import write_csv
from zeus_airflow.core.common.config import DEFAULT_ETA, ConfigError
from zeus_airflow.core.common.extras import check_installed

if TYPE_CHECKING:
    from zeus_airflow.capriccio.experiment import SliceOutcome

CSV_COLUMNS = [
    "slice",
    "day",
    "post_shift_share",
    "batch_size",
    "power_limit_w",
    "energy_j",
    "time_s",
    "cost",
    "epochs",
    "reached_target",
    "tries",
    "val_accuracy",
    "wall_s",
    "measurement",
]
CLOCKS = ("cpu", "wall")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "capriccio",
        help=help_of("capriccio"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    _register_generate(actions)
    _register_slice(actions)
    _register_run(actions)


# --- generate --------------------------------------------------------------------------------
def _register_generate(actions: argparse._SubParsersAction) -> None:
    spec = CorpusSpec()
    parser = actions.add_parser("generate", help="write the synthetic drifting corpus")
    parser.add_argument("--output", required=True, type=Path, help="CSV to write")
    _corpus_arguments(parser, spec)
    parser.set_defaults(handler=_generate)


def _corpus_arguments(parser: argparse.ArgumentParser, spec: CorpusSpec) -> None:
    parser.add_argument("--days", type=int, default=spec.days)
    parser.add_argument("--tweets-per-day", type=int, default=spec.tweets_per_day)
    parser.add_argument(
        "--shift-day",
        type=_shift_day,
        default=spec.shift_day,
        help=f"day of the abrupt shift, or 'none' (default {spec.shift_day})",
    )
    parser.add_argument("--corpus-seed", type=int, default=spec.seed)


def _corpus_spec(args: argparse.Namespace) -> CorpusSpec:
    return CorpusSpec(
        days=args.days,
        tweets_per_day=args.tweets_per_day,
        shift_day=args.shift_day,
        seed=args.corpus_seed,
    )


def _generate(args: argparse.Namespace) -> int:
    spec = _corpus_spec(args)
    tweets = write_corpus(spec, args.output)
    days = sorted(set(tweets.day.tolist()))
    print(
        f"wrote {args.output}: {len(tweets)} synthetic tweets on {len(days)} of {spec.days} "
        f"days from {spec.first_day}; abrupt shift on {spec.shift_date or 'no day'}"
    )
    return 0


# --- slice -----------------------------------------------------------------------------------
def _register_slice(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser("slice", help="cut a Sentiment140-format CSV into daily slices")
    parser.add_argument("--corpus", required=True, type=Path)
    parser.add_argument(
        "--output-dir", required=True, type=Path, help="one folder per slice, named by its day"
    )
    parser.add_argument(
        "--day",
        type=date.fromisoformat,
        default=None,
        help="only the slice starting on this day (YYYY-MM-DD)",
    )
    _size_arguments(parser)
    parser.set_defaults(handler=_slice)


def _size_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--slice-size",
        type=int,
        default=DEMO_SLICE_SIZE,
        help=f"tweets per slice (default {DEMO_SLICE_SIZE}; the paper: 500000)",
    )
    parser.add_argument(
        "--val-size",
        type=int,
        default=DEMO_VAL_SIZE,
        help=f"validation tweets per slice (default {DEMO_VAL_SIZE}; the paper: 75000)",
    )
    parser.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED)


def _slice(args: argparse.Namespace) -> int:
    sizes = SliceSizes(args.slice_size, args.val_size)
    tweets = read_tweets(args.corpus).sorted_by_time()
    plan = plan_slices(tweets, sizes)
    if args.day is not None:
        chosen = slice_for_day(plan, args.day)
        if chosen is None:
            raise ConfigError(
                f"day={args.day} is invalid: no slice starts on it (a day without "
                f"tweets, or too late for {sizes.slice_size} more); slices start "
                f"on {plan[0].day} .. {plan[-1].day}"
            )
        plan = [chosen]
    for spec in plan:
        out = write_slice(
            tweets,
            spec,
            sizes,
            args.output_dir / spec.day.isoformat(),
            args.split_seed,
            source=str(args.corpus),
        )
        print(f"slice {spec.index:3d}  {spec.day}  tweets {spec.start}..{spec.stop - 1}  -> {out}")
    return 0


# --- run -------------------------------------------------------------------------------------
def _register_run(actions: argparse._SubParsersAction) -> None:
    job = CapriccioJob().parameters
    parser = actions.add_parser(
        "run",
        help="retrain on each daily slice through the engine (real CPU training)",
        description="Retrain on each slice through the real engine and store: real PyTorch "
        "training on this CPU, power and slowdown from a simulated GPU. Without "
        "--corpus the synthetic corpus is generated in memory.",
    )
    add_traces_option(parser)
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="Sentiment140-format CSV (default: the synthetic corpus)",
    )
    parser.add_argument(
        "--shift-date",
        type=date.fromisoformat,
        default=None,
        help="marks a known abrupt shift of --corpus in the CSV and plot",
    )
    _corpus_arguments(parser, CorpusSpec())
    _size_arguments(parser)
    parser.add_argument("--slices", type=int, default=38, help="slices to retrain on (paper: 38)")
    _job_arguments(parser, job)
    _device_arguments(parser)
    parser.add_argument(
        "--store-url", default=None, help="SQLAlchemy URL of the store (default: in memory)"
    )
    parser.add_argument("--output-csv", required=True, type=Path)
    parser.add_argument("--plot", type=Path, default=None)
    parser.set_defaults(handler=_run)


def _job_arguments(parser: argparse.ArgumentParser, job: Mapping[str, Any]) -> None:
    """The job's settings (``CapriccioJob``'s defaults) and the policy's seed."""
    parser.add_argument(
        "--target",
        type=float,
        default=job["target_metric"],
        help="validation accuracy a run must reach",
    )
    parser.add_argument("--max-epochs", type=int, default=job["max_epochs"])
    parser.add_argument(
        "--window",
        type=_window,
        default=job["window_size"],
        help=f"posterior window, or 'none' (default {job['window_size']})",
    )
    parser.add_argument("--beta", type=float, default=job["beta"])
    parser.add_argument("--eta", type=float, default=DEFAULT_ETA)
    parser.add_argument("--seed", type=int, default=1)


def _device_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulated GPU, its clock and the CPU threads that train."""
    parser.add_argument("--gpu", default="v100", help="trace GPU of the simulated device")
    parser.add_argument(
        "--curve",
        default="sentiment140",
        help="workload whose measured power curve the simulated GPU follows",
    )
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="cpu",
        help="time training steps by this process's CPU time (default: steady "
        "on a shared machine) or by the wall clock",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def _run(args: argparse.Namespace) -> int:
    # PyTorch is imported here only: every zeus-airflow command loads this module, and the
    # base install has no torch (the examples extra brings it).
    check_installed("torch", "zeus-airflow capriccio")
    if args.plot is not None:
        check_installed("matplotlib", "capriccio --plot")
    import torch

    from zeus_airflow.capriccio.experiment import run_capriccio
    from zeus_airflow.core.common.traces import load_workload_trace
    from zeus_airflow.core.devices.simulated import SimulatedGPU
    from zeus_airflow.core.devices.spec import resolve_traces_dir
    from zeus_airflow.core.store.sql import SQLStore

    sizes, job = _checked_job(args)
    trace = load_workload_trace(resolve_traces_dir(args.traces), args.gpu, args.curve)
    tweets, shift, source = _corpus(args)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.monotonic
    device = SimulatedGPU(trace, clock=clock)
    store = SQLStore(args.store_url, create_schema=True) if args.store_url else SQLStore.in_memory()
    print(
        f"Capriccio: {source}; {args.slices} slices of {sizes.slice_size} tweets; "
        f"window {args.window or 'none'}, beta {args.beta}; simulated GPU following "
        f"{device.source}, {args.clock} clock",
        file=sys.stderr,
    )
    started = time.perf_counter()
    outcomes = run_capriccio(
        tweets,
        sizes,
        job,
        store,
        device,
        args.slices,
        seed=args.seed,
        shift=shift,
        eta=args.eta,
        split_seed=args.split_seed,
        on_slice=_progress,
    )
    _report(args, outcomes, time.perf_counter() - started, source)
    return 0


def _checked_job(args: argparse.Namespace) -> tuple[SliceSizes, CapriccioJob]:
    """The slices' sizes and the job, every argument checked before the corpus is built or
    anything trains."""
    sizes = SliceSizes(args.slice_size, args.val_size)
    job = CapriccioJob(
        {
            "target_metric": args.target,
            "max_epochs": args.max_epochs,
            "window_size": args.window,
            "beta": args.beta,
        }
    )
    job.job_config("capriccio", args.eta)
    if args.threads < 1:
        raise ConfigError(f"threads={args.threads} is invalid: expected an integer >= 1")
    return sizes, job


def _report(
    args: argparse.Namespace, outcomes: list[SliceOutcome], wall_s: float, source: str
) -> None:
    """The CSV, the summary line and the plot of a finished run."""
    write_csv(args.output_csv, CSV_COLUMNS, map(_row, outcomes))
    failed = sum(not o.reached_target for o in outcomes)
    print(
        f"{len(outcomes)} slices retrained in {wall_s:.1f} s wall; {failed} without reaching "
        f"the target; energy {sum(o.energy_j for o in outcomes) / 1e3:.1f} kJ and time "
        f"{sum(o.time_s for o in outcomes):.0f} s (simulated); wrote {args.output_csv}"
    )
    if args.plot is not None:
        from zeus_airflow.capriccio.plot import plot_capriccio

        plot_capriccio(outcomes, args.plot, f"Capriccio ({source})")
        print(f"wrote {args.plot}")


def _corpus(args: argparse.Namespace) -> tuple[Tweets, date | None, str]:
    """(time-sorted corpus, day of its abrupt shift if known, a label for it)."""
    if args.corpus is not None:
        return read_tweets(args.corpus).sorted_by_time(), args.shift_date, str(args.corpus)
    spec = _corpus_spec(args)
    return generate(spec).sorted_by_time(), spec.shift_date, "synthetic corpus"


def _progress(o: SliceOutcome) -> None:
    chosen = f"b={o.batch_size} at {o.power_limit_w} W" if o.reached_target else "FAILED"
    share = "" if o.post_shift_share is None else f"  post-shift {o.post_shift_share:4.0%}"
    print(
        f"slice {o.index:2d} {o.day}{share}  {chosen:16s} {o.energy_j:7.0f} J "
        f"{o.time_s:6.1f} s (simulated)  tries {o.tried}  [{o.wall_s:.1f} s wall]",
        file=sys.stderr,
        flush=True,
    )


def _row(o: SliceOutcome) -> dict[str, object]:
    return {
        "slice": o.index,
        "day": o.day.isoformat(),
        "post_shift_share": "" if o.post_shift_share is None else round(o.post_shift_share, 3),
        "batch_size": o.batch_size or "",
        "power_limit_w": o.power_limit_w or "",
        "energy_j": round(o.energy_j, 1),
        "time_s": round(o.time_s, 3),
        "cost": round(o.cost, 1),
        "epochs": o.epochs,
        "reached_target": o.reached_target,
        "tries": o.tried,
        "val_accuracy": "" if o.val_accuracy is None else round(o.val_accuracy, 4),
        "wall_s": round(o.wall_s, 2),
        "measurement": "simulated",
    }


def _shift_day(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def _window(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)
