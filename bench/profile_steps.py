"""Steps (and slices) until a power profile is complete, before and after windows sized by
time and the search over limits, per traced (GPU, workload).

    python bench/profile_steps.py --output bench/profile_steps

Drives the real PowerLimitProfiler through a TrainingRun (``open_run``) on the ReplayGPU
(REPLAYED: the paper's traces on a virtual clock) for every traced batch size, and counts
the training steps until the profile is complete, epoch-end re-warm-ups included. "before":
warmup_steps 10, profile_steps 40, no seconds, every candidate measured highest first (the
old sweep); "after": the defaults of ProfilerConfig with the search. Also two short jobs,
counting runs until the profile is complete (a slice in progress is kept between runs):
runs of 16 steps at 0.2 s/step (REPLAYED: the A40's sentiment140 trace at b0 128, whose
steps take 0.20 s at the maximum limit), and the example classifier (real PyTorch on the
CPU) on the SIMULATED V100 (runs of the hourly DAG's size). Writes <output>.csv (replayed
cells), <output>_short.csv (short jobs) and <output>.md; ``--quick`` does one cell and skips
the short jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from statistics import median
from unittest import mock

from zeus_airflow.cli.options import add_output_option, add_traces_option, bench_output
from zeus_airflow.cli.output import write_csv
from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.limit_search import LimitObjective
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices.base import GPUGroup
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import PowerProfile
from zeus_airflow.core.train.run import open_run

GPUS = ("v100", "a40")
WORKLOADS = ("librispeech", "squad", "sentiment140", "imagenet", "cifar100", "movielens-1m")
BEFORE = ProfilerConfig(warmup_steps=10, profile_steps=40, warmup_s=0.0, profile_s=0.0)
AFTER = ProfilerConfig()
HOURLY_DAG = ProfilerConfig(warmup_steps=3, profile_steps=10)
"""What dags/hourly_retrain.py sets: its step floors, the default seconds."""
SHORT_RUN_STEPS = 16
MAX_EPOCHS = 10_000
"""Far more than any profile needs: the runs end once the profile is complete."""


def sweep_next_limit_w(
    candidates_w: Sequence[int],
    measured: Mapping[int, LimitMeasurement],
    _objective: LimitObjective,
) -> int | None:
    """The old order: every candidate, highest first."""
    pending = [w for w in sorted(candidates_w, reverse=True) if w not in measured]
    return pending[0] if pending else None


@contextlib.contextmanager
def settings(name: str) -> Iterator[ProfilerConfig]:
    """The profiler's configuration for ``name``; "before" also swaps the search for the
    sweep the profiler had then."""
    if name != "before":
        yield AFTER if name == "after" else HOURLY_DAG
        return
    with mock.patch("zeus_airflow.core.train.profiler.next_limit_w", sweep_next_limit_w):
        yield BEFORE


def job(trace: WorkloadTrace, batch_size: int, profiler: ProfilerConfig) -> JobConfig:
    w = trace.workload
    return JobConfig(
        "bench.profile",
        (batch_size,),
        batch_size,
        w.target_metric,
        MAX_EPOCHS,
        w.higher_is_better,
        profiler=profiler,
    )


def replay_profile(
    trace: WorkloadTrace, batch_size: int, profiler: ProfilerConfig
) -> tuple[int, PowerProfile, int | None]:
    """(steps until the profile is complete, the profile, its optimum) on the replay GPU."""
    gpu = ReplayGPU(trace)
    gpu.use_batch_size(batch_size)
    steps = 0

    def work(count: int) -> None:
        nonlocal steps
        if run.profiler.is_profiling:  # chunks end where the profiler switches
            steps += count
        gpu.advance_steps(count)

    with open_run(job(trace, batch_size, profiler), batch_size, gpu) as run:
        for _ in run.epochs():
            run.run_steps(gpu.steps_per_epoch(), work)
            done = not run.profiler.is_profiling
            run.report_metric(trace.workload.target_metric if done else _short_of(trace))
        optimum = run.finish().optimal_power_limit_w
    return steps, run.profiler.profile, optimum


def short_job_runs(profiler: ProfilerConfig, max_runs: int = 30) -> int | None:
    """Runs of one SHORT_RUN_STEPS-step epoch until the b0 profile of the A40's sentiment140
    trace (0.20 s/step at the maximum limit) is complete; None: not within ``max_runs``."""
    trace = load_workload_trace(resolve_traces_dir(None), "a40", "sentiment140")
    b0 = trace.default_batch_size
    gpu = ReplayGPU(trace)
    gpu.use_batch_size(b0)
    profile = PowerProfile(b0, gpu.model, gpu.count, gpu.candidate_power_limits_w())
    for number in range(1, max_runs + 1):
        with open_run(job(trace, b0, profiler), b0, gpu, profile=profile) as run:
            for _ in run.epochs():
                run.run_steps(SHORT_RUN_STEPS, gpu.advance_steps)
                run.report_metric(trace.workload.target_metric)
            outcome = run.finish()
        if outcome.optimal_power_limit_w is not None:
            return number
    return None


def _cost_gap_pct(trace: WorkloadTrace, batch_size: int, found_w: int | None) -> float:
    """How much more the found optimum's traced cost per step is than the best limit's, in
    % (Zeus cost, eta 0.5, MAXPOWER the highest traced limit)."""
    max_power_w = max(trace.power_limits_w)

    def cost(limit_w: int) -> float:
        point = trace.epoch(batch_size, limit_w)
        return point.time_s * (0.5 * point.avg_power_w + 0.5 * max_power_w)

    if found_w is None:
        return float("nan")
    best = min(cost(w) for w in trace.power_limits_w)
    return round(100.0 * (cost(found_w) / best - 1.0), 2)


def _short_of(trace: WorkloadTrace) -> float:
    target = trace.workload.target_metric
    return target * 0.5 if trace.workload.higher_is_better else target * 2.0


def replay_rows(
    traces: Path, cells: Sequence[tuple[str, str]], quick: bool
) -> list[dict[str, object]]:
    rows = []
    for gpu, workload in cells:
        trace = load_workload_trace(traces, gpu, workload)
        b0 = trace.default_batch_size
        sizes = (b0,) if quick else trace.batch_sizes
        row: dict[str, object] = {
            "gpu": gpu,
            "workload": workload,
            "b0": b0,
            "limits": len(trace.power_limits_w),
            "steps_per_epoch_b0": trace.steps_per_epoch(b0),
        }
        optima = {}
        for name in ("before", "after"):
            with settings(name) as profiler:
                results = {b: replay_profile(trace, b, profiler) for b in sizes}
            steps_b0, profile_b0, optima[name] = results[b0]
            row[f"{name}_steps_b0"] = steps_b0
            row[f"{name}_slices_b0"] = len(profile_b0.measurements)
            row[f"{name}_epochs_b0"] = round(steps_b0 / trace.steps_per_epoch(b0), 2)
            row[f"{name}_median_steps"] = median(r[0] for r in results.values())
        row["same_optimum_b0"] = optima["before"] == optima["after"]
        row["optimum_cost_gap_pct_b0"] = _cost_gap_pct(trace, b0, optima["after"])
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def classifier_runs(profiler: ProfilerConfig, max_runs: int = 30) -> tuple[int | None, float]:
    """(runs of the hourly example until its b0 profile is complete, or None within
    ``max_runs``; the real seconds they took) on the simulated V100 (cifar100 curve)."""
    import torch

    from zeus_airflow.core.devices.simulated import SimulatedGPU
    from zeus_airflow.examples import classifier

    torch.set_num_threads(1)
    trace = load_workload_trace(resolve_traces_dir(None), "v100", "cifar100")
    gpu: GPUGroup = SimulatedGPU(trace)
    task = classifier.Task(centres_seed=0, spread=0.55, train_samples=8192, validation_samples=2048)
    config = JobConfig(
        "bench.hourly", (128,), 128, target_metric=0.885, max_epochs=10, profiler=profiler
    )
    profile = PowerProfile(128, gpu.model, gpu.count, gpu.candidate_power_limits_w())
    started = time.monotonic()
    for number in range(1, max_runs + 1):
        with open_run(config, 128, gpu, profile=profile) as run:
            task.retrain(run, seed=number)
            outcome = run.finish()
        if outcome.optimal_power_limit_w is not None:
            return number, time.monotonic() - started
    return None, time.monotonic() - started


def classifier_row() -> dict[str, object]:
    """Runs until complete: the 16-step job (replayed) and the classifier (simulated)."""
    row: dict[str, object] = {}
    for name in ("before", "after", "dag"):
        with settings(name) as profiler:
            short = short_job_runs(profiler)
            runs, seconds = classifier_runs(profiler)
        row[f"{name}_short_runs"] = short if short is not None else "> 30"
        row[f"{name}_runs"] = runs if runs is not None else "> 30"
        row[f"{name}_real_s"] = round(seconds, 1)
    print(row, flush=True)
    return row


def _line(row: Mapping[str, object]) -> str:
    return " | ".join(str(v) for v in row.values())


def markdown(rows: list[dict[str, object]], short: dict[str, object] | None) -> str:
    header = (
        "| GPU | workload | b0 | limits | steps/epoch (b0) | before: steps (b0) | slices "
        "| epochs | after: steps (b0) | slices | epochs | median steps over sizes, "
        "before -> after | same optimum | found optimum's cost over the best, % |"
    )
    lines = [
        "Steps until the power profile is complete. REPLAYED on the ReplayGPU "
        "(the paper's traces, virtual clock).",
        "",
        header,
        "|" + "---|" * 14,
    ]
    for r in rows:
        lines.append(
            f"| {r['gpu']} | {r['workload']} | {r['b0']} | {r['limits']} | "
            f"{r['steps_per_epoch_b0']} | {r['before_steps_b0']} | {r['before_slices_b0']} | "
            f"{r['before_epochs_b0']} | {r['after_steps_b0']} | {r['after_slices_b0']} | "
            f"{r['after_epochs_b0']} | {r['before_median_steps']} -> "
            f"{r['after_median_steps']} | {'yes' if r['same_optimum_b0'] else 'no'} | "
            f"{r['optimum_cost_gap_pct_b0']} |"
        )
    if short is not None:
        lines += [
            "",
            "Short jobs: runs until the profile is complete (a slice in progress "
            "is kept between runs). 16-step runs at 0.20 s/step: REPLAYED (A40, "
            "sentiment140, b0 128). The hourly example classifier (real PyTorch on the "
            "CPU): the SIMULATED V100, batch size 128, real seconds in total.",
            "",
            "| job | before (10 + 40 steps, sweep) | after, defaults | after, the DAG's "
            "step floors (3 + 10) |",
            "|---|---|---|---|",
            f"| 16 steps a run, runs | {short['before_short_runs']} | "
            f"{short['after_short_runs']} | {short['dag_short_runs']} |",
            f"| example classifier, runs | {short['before_runs']} | "
            f"{short['after_runs']} | {short['dag_runs']} |",
            f"| example classifier, real s | {short['before_real_s']} | "
            f"{short['after_real_s']} | {short['dag_real_s']} |",
        ]
    return "\n".join(lines)


def main(
    argv: Sequence[str] | None = None, classifier: Callable[[], dict[str, object]] = classifier_row
) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_traces_option(parser)
    add_output_option(parser, "profile_steps")
    parser.add_argument(
        "--quick", action="store_true", help="one cell (V100, cifar100, b0 only), no classifier"
    )
    args = parser.parse_args(argv)
    args.output = bench_output(args.output, args.quick, "profile_steps")
    traces = resolve_traces_dir(args.traces)
    cells = [("v100", "cifar100")] if args.quick else [(g, w) for g in GPUS for w in WORKLOADS]
    rows = replay_rows(traces, cells, args.quick)
    short = None if args.quick else classifier()
    write_csv(args.output.with_suffix(".csv"), list(rows[0]), rows)
    if short is not None:
        short_csv = args.output.with_name(args.output.name + "_short.csv")
        write_csv(short_csv, list(short), [short])
    report = markdown(rows, short)
    args.output.with_suffix(".md").write_text(report + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
