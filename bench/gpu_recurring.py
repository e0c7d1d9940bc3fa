"""Recurring training on one real NVIDIA GPU through the real engine: the batch-size half of
Zeus, measured, against running Default every time.

For a GPU node that has PyTorch with CUDA and nvidia-ml-py but neither Airflow nor network
access, as ``bench/gpu_check.py`` (whose read-only NVML it uses): it imports only the
Airflow-free core from this checkout, which besides torch and nvidia-ml-py needs SQLAlchemy,
alembic (with Mako and MarkupSafe) and numpy, carried as wheels where missing and installed
with ``pip install --no-index`` (docs/devices.md, "bench/gpu_recurring.py").

It NEVER changes a GPU setting. Every job runs in ``measure`` mode (the profiler only reads
the current power limit), and NVML is reached only through ``gpu_check.ReadOnlyNVML``, which
refuses every NVML function that changes something before NVML sees it; the report counts
the attempts (always 0) and the limit read before and after.

The job: a small ResNet-style CNN (``gpu_check.resnet_cnn``) trained on synthetic images, ten
classes, each a fixed smooth pattern under Gaussian noise, to a target validation accuracy;
fresh samples every recurrence, so the epochs it takes vary with the batch size and a little
from one recurrence to the next. Every arm trains each recurrence on the same data from the
same initial weights, interleaved (their order rotates) so that they share the GPU's thermal
state: ``zeus`` (the engine with Zeus's policy and the product's defaults, its exploration
budget included), ``zeus_no_budget`` (the same without the budget, exploring as the paper)
and ``default`` (the Default policy: the default batch size at the GPU's current limit, every
recurrence: what the DAG does without Zeus). Each is its own job in one SQLite store.

Per recurrence it writes ``gpu_recurring.csv`` and ``gpu_recurring.md`` (rewritten after each,
so a stopped run keeps what it measured) and ``gpu_recurring.json`` with the device, driver
and torch versions: each arm's batch size (and the sizes tried), epochs, steps, time, GPU
energy from the counter, cost; the budget's estimate of Default's cost and the budget left
(from the recurrence's result); the counter's energy over the power sampled every 10 ms and
integrated, over the same training windows; and each arm's cumulative energy against
Default's. The store is ``gpu_recurring.db`` (``zeus-airflow runs --db sqlite:///...``).

``--simulated`` runs the same code on the CPU against the fake NVML, its clock this process's
CPU time: every figure is then labelled simulated. The suite runs it with ``--quick``
(tests/test_gpu_recurring.py).

    python bench/gpu_recurring.py --out gpu_recurring_results         # on the GPU node, < 5 min
    python bench/gpu_recurring.py --simulated --quick --out /tmp/gr   # anywhere, seconds
    python bench/gpu_recurring.py --simulated --out /tmp/gr_full      # the full job on the CPU
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for _path in (REPO, BENCH):  # a checkout, not an installed package; gpu_check beside us
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import gpu_check  # noqa: E402

BUDGET_S = 270.0
"""Default time budget (s): no recurrence starts that would likely end past it, so the whole
command, CUDA's start included, ends within 5 minutes."""


@dataclass(frozen=True)
class Arm:
    """A way to run the job: a policy (``core.policy.POLICIES``), with or without the
    exploration budget."""

    policy: str
    budgeted: bool
    label: str


ARMS = {
    "zeus": Arm("zeus", True, "Zeus (the product's defaults, its exploration budget)"),
    "zeus_no_budget": Arm("zeus", False, "Zeus without the budget (explores as the paper)"),
    "default": Arm("default", False, "Default (the default batch size, every recurrence)"),
}
"""Every arm trains every recurrence on the same data, interleaved; Default is the baseline."""
SAMPLE_INTERVAL_S = 0.01
"""How often the sampled meter reads the GPU's power (one read: 1.8 µs on an H200)."""


# --- sizes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    """The job's workload and the run's length; ``--quick`` shrinks them to seconds."""

    image_px: int = 16
    width: int = 16
    """Channels of the CNN's first block (then 2x and 4x)."""
    classes: int = 10
    signal: float = 0.17
    """Each class's pattern, per pixel (root mean square), over noise of 1."""
    train_samples: int = 4096
    val_samples: int = 1024
    learning_rate: float = 0.01
    """SGD's, with momentum 0.9, the same at every batch size (the job's own setting)."""
    batch_sizes: tuple[int, ...] = (16, 32, 64, 128, 256)
    default_batch_size: int = 64
    target_accuracy: float = 0.9
    max_epochs: int = 20
    recurrences: int = 12
    warmup_steps: int = 5
    """Untimed steps at every batch size before the first recurrence (CUDA, cuDNN start)."""
    simulated_counter_update_s: float = 0.1
    """With --simulated: how often the fake GPU's energy counter advances (an H200's: 0.1 s)."""


QUICK = Sizes(
    image_px=8,
    width=4,
    signal=1.0,
    train_samples=256,
    val_samples=128,
    learning_rate=0.05,
    batch_sizes=(8, 16, 32, 64, 128),
    default_batch_size=64,
    target_accuracy=0.8,
    max_epochs=6,
    recurrences=12,
    warmup_steps=1,
    simulated_counter_update_s=0.0,
)


# --- the job ----------------------------------------------------------------------------------
MEASURE_ONLY_MODE = "measure"
"""The profiler's only mode here: it reads the current limit and never sets one."""


def job_config(sizes: Sizes, arm: str, exploration_budget: float | None) -> Any:
    """The arm's job, measure mode only; ``exploration_budget`` for a budgeted arm (None:
    the product's default)."""
    from zeus_airflow.core.common.config import (
        DEFAULT_EXPLORATION_BUDGET,
        JobConfig,
        ProfilerConfig,
    )

    budget = None
    if ARMS[arm].budgeted:
        budget = DEFAULT_EXPLORATION_BUDGET if exploration_budget is None else exploration_budget
    return JobConfig(
        f"gpu_recurring.{arm}",
        sizes.batch_sizes,
        sizes.default_batch_size,
        target_metric=sizes.target_accuracy,
        max_epochs=sizes.max_epochs,
        exploration_budget=budget,
        profiler=ProfilerConfig(mode=MEASURE_ONLY_MODE),
    )


@dataclass(frozen=True)
class Data:
    """One recurrence's samples, on the training device: images (n, 3, px, px), labels (n,)."""

    x: Any
    y: Any
    val_x: Any
    val_y: Any


def class_patterns(torch: Any, sizes: Sizes) -> Any:
    """Each class's fixed smooth pattern (classes, 3, px, px), per-pixel root mean square 1:
    the job's task, the same in every recurrence."""
    generator = torch.Generator().manual_seed(0)
    coarse = torch.randn(sizes.classes, 3, 4, 4, generator=generator)
    fine = torch.nn.functional.interpolate(
        coarse, size=(sizes.image_px, sizes.image_px), mode="bilinear", align_corners=False
    )
    return fine / fine.pow(2).mean(dim=(1, 2, 3), keepdim=True).sqrt()


def recurrence_data(torch: Any, sizes: Sizes, patterns: Any, seed: int, device: str) -> Data:
    """Fresh samples for one recurrence: a class pattern times ``signal`` plus unit noise.
    Drawn on the CPU, so that every device trains on the same numbers."""
    generator = torch.Generator().manual_seed(seed)

    def draw(count: int) -> tuple[Any, Any]:
        y = torch.randint(0, sizes.classes, (count,), generator=generator)
        noise = torch.randn(count, 3, sizes.image_px, sizes.image_px, generator=generator)
        return (sizes.signal * patterns[y] + noise).to(device), y.to(device)

    x, y = draw(sizes.train_samples)
    val_x, val_y = draw(sizes.val_samples)
    return Data(x, y, val_x, val_y)


def accuracy(torch: Any, model: Any, data: Data) -> float:
    """Validation accuracy (one host sync, once an epoch)."""
    model.eval()
    with torch.no_grad():
        correct = sum(
            (model(x).argmax(1) == y).sum()
            for x, y in zip(data.val_x.split(1024), data.val_y.split(1024), strict=True)
        )
    model.train()
    return float(correct) / len(data.val_y)


class CounterAndSampled:
    """The energy counter and power sampled every ``SAMPLE_INTERVAL_S`` and integrated, over
    the same windows: each try's training, from its first step to its last metric (J)."""

    def __init__(self, counter_gpus: Any, sampled_gpus: Any) -> None:
        from zeus_airflow.core.train.monitor import EnergyMonitor

        self.counter = EnergyMonitor(counter_gpus)
        self.sampled = EnergyMonitor(sampled_gpus)
        self.windows: list[tuple[float, float]] = []
        """(counter J, sampled J) of each try since the last :meth:`take`."""

    def begin(self) -> None:
        self.counter.begin_window("training")
        self.sampled.begin_window("training")

    def end(self) -> None:
        counted = self.counter.end_window("training")
        sampled = self.sampled.end_window("training")
        self.windows.append((counted.energy_j, sampled.energy_j))

    def cancel(self) -> None:
        self.counter.cancel_window("training")
        self.sampled.cancel_window("training")

    def take(self) -> list[tuple[float, float]]:
        windows, self.windows = self.windows, []
        return windows


def make_train(
    torch: Any, sizes: Sizes, data: Data, seed: int, meters: CounterAndSampled
) -> Callable[[Any], None]:
    """The train function of recurrence ``seed``: the same initial weights and shuffling for
    every arm, so that the arms differ by batch size only."""

    def train(run: Any) -> None:
        torch.manual_seed(seed)
        model = gpu_check.resnet_cnn(torch, sizes.width, sizes.classes).to(data.x.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=sizes.learning_rate, momentum=0.9)
        shuffle = torch.Generator().manual_seed(seed)
        run.start_training()  # setup is over: the engine's training window opens here
        meters.begin()
        try:
            for _ in run.epochs():
                order = torch.randperm(len(data.y), generator=shuffle).to(data.x.device)
                for batch in run.steps(order.split(run.batch_size)):
                    optimizer.zero_grad(set_to_none=True)
                    loss = torch.nn.functional.cross_entropy(model(data.x[batch]), data.y[batch])
                    loss.backward()
                    optimizer.step()
                run.report_metric(accuracy(torch, model, data))
        except BaseException:
            meters.cancel()
            raise
        meters.end()

    return train


def warm_up(torch: Any, sizes: Sizes, data: Data) -> None:
    """A few untimed steps at every batch size and one evaluation: CUDA's context, cuDNN's
    handles and the allocator start here, not inside the first arm's first run."""
    model = gpu_check.resnet_cnn(torch, sizes.width, sizes.classes).to(data.x.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=sizes.learning_rate)
    for batch_size in sizes.batch_sizes:
        for _ in range(sizes.warmup_steps):
            optimizer.zero_grad(set_to_none=True)
            x, y = data.x[:batch_size], data.y[:batch_size]
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    accuracy(torch, model, data)


# --- the recurrences --------------------------------------------------------------------------
@dataclass
class Arms:
    """Each arm's engine (one SQLite store, one GPU group) and the meters they share."""

    engines: dict[str, Any]
    meters: CounterAndSampled
    cumulative_j: dict[str, float] = field(default_factory=dict)

    def order(self, index: int) -> list[str]:
        """Recurrence ``index``'s order (0-based): the arms rotate, so that each runs first,
        second, ... equally often and none always meets the GPU warmer."""
        names = list(self.engines)
        shift = index % len(names)
        return names[shift:] + names[:shift]


def arm_fields(arm: str, result: Any, windows: list[tuple[float, float]]) -> dict[str, Any]:
    """One arm's figures of one recurrence, from its ``RecurrenceResult``: energy (J, the
    counter) and time (s) of every try's training; the budget as of the last try's decision
    (``final.budget.default_cost``: its estimate of Default's cost; ``budget_left_runs``)."""
    counted_j = sum(c for c, _ in windows)
    sampled_j = sum(s for _, s in windows)
    budget = result.final.budget
    return {
        f"{arm}_batch_size": result.batch_size,
        f"{arm}_tried": " ".join(str(t.outcome.batch_size) for t in result.tries),
        f"{arm}_phase": result.final.phase,
        f"{arm}_epochs": result.epochs,
        f"{arm}_steps": sum(t.outcome.steps or 0 for t in result.tries),
        f"{arm}_reached_target": result.reached_target,
        f"{arm}_time_s": result.time_s,
        f"{arm}_energy_j": result.energy_j,
        f"{arm}_cost": result.cost,
        f"{arm}_budget_default_cost": None if budget is None else budget.default_cost,
        f"{arm}_budget_left_runs": result.budget_left_runs,
        f"{arm}_counter_over_sampled": counted_j / sampled_j if sampled_j > 0 else None,
    }


def run_one(torch: Any, sizes: Sizes, arms: Arms, data: Data, index: int) -> dict[str, Any]:
    """Recurrence ``index`` (0-based) of every arm, on the same data, in the arms' order."""
    from zeus_airflow.core.domain import RecurrenceKey

    order = arms.order(index)
    row: dict[str, Any] = {"recurrence": index + 1, "order": " ".join(order)}
    for arm in order:
        arms.meters.take()
        result = arms.engines[arm].run_recurrence(
            make_train(torch, sizes, data, index + 1, arms.meters),
            RecurrenceKey(run_id=f"recurrence-{index + 1:02d}"),
        )
        row.update(arm_fields(arm, result, arms.meters.take()))
        arms.cumulative_j[arm] = arms.cumulative_j.get(arm, 0.0) + result.energy_j
    for arm in arms.engines:
        row[f"{arm}_cumulative_energy_j"] = arms.cumulative_j[arm]
        row[f"{arm}_cumulative_over_default"] = (
            arms.cumulative_j[arm] / arms.cumulative_j["default"]
        )
    return row


def run_recurrences(
    torch: Any,
    sizes: Sizes,
    arms: Arms,
    device: str,
    deadline_s: float,
    written: Callable[[list[dict[str, Any]], str | None], None],
) -> tuple[list[dict[str, Any]], str | None]:
    """Every recurrence, the arms interleaved; ``written`` gets the rows so far after each.
    Stops early, with the reason, when the next recurrence would likely end past
    ``deadline_s`` (monotonic s)."""
    patterns = class_patterns(torch, sizes)
    rows: list[dict[str, Any]] = []
    longest_s, stopped = 0.0, None
    for index in range(sizes.recurrences):
        began_s = time.monotonic()
        if rows and began_s + longest_s > deadline_s:
            stopped = (
                f"time budget: stopped after {len(rows)} of {sizes.recurrences} recurrences "
                f"(the longest took {longest_s:.1f} s)"
            )
            break
        data = recurrence_data(torch, sizes, patterns, 1000 + index, device)
        if index == 0:
            warm_up(torch, sizes, data)
        rows.append(run_one(torch, sizes, arms, data, index))
        wall_s = time.monotonic() - began_s
        longest_s = max(longest_s, wall_s)
        _progress(_progress_line(rows[-1], arms.engines, wall_s))
        written(rows, None)
    return rows, stopped


def _progress_line(row: dict[str, Any], arms: dict[str, Any], wall_s: float) -> str:
    parts = [
        f"{arm} b={row[f'{arm}_batch_size']} ({row[f'{arm}_phase']}) "
        f"{row[f'{arm}_energy_j']:.1f} J, cumulative {row[f'{arm}_cumulative_over_default']:.3f}"
        for arm in arms
    ]
    return f"recurrence {row['recurrence']} ({wall_s:.1f} s): " + "; ".join(parts)


def summary(rows: list[dict[str, Any]], arms: list[str], stopped: str | None) -> dict[str, Any]:
    """Each arm's totals after the last recurrence run, against Default's."""
    ratios = sorted(
        r[f"{arm}_counter_over_sampled"]
        for r in rows
        for arm in arms
        if r[f"{arm}_counter_over_sampled"] is not None
    )
    result: dict[str, Any] = {"recurrences": len(rows), "stopped": stopped, "arms": {}}
    result["counter_over_sampled"] = (
        {"min": ratios[0], "median": ratios[len(ratios) // 2], "max": ratios[-1]}
        if ratios
        else None
    )
    for arm in arms if rows else ():
        energy_j = rows[-1][f"{arm}_cumulative_energy_j"]
        over = rows[-1][f"{arm}_cumulative_over_default"]
        result["arms"][arm] = {
            "energy_j": energy_j,
            "energy_over_default": over,
            "energy_saved_pct": 100.0 * (1.0 - over),
            "time_s": sum(r[f"{arm}_time_s"] for r in rows),
            "cost": sum(r[f"{arm}_cost"] for r in rows),
            "batch_sizes": [r[f"{arm}_batch_size"] for r in rows],
            "tried": sorted({int(b) for r in rows for b in r[f"{arm}_tried"].split()}),
        }
    return result


# --- the report -------------------------------------------------------------------------------
def _progress(text: str) -> None:
    gpu_check.progress(text, "gpu_recurring")


def _num(value: Any, digits: int = 4) -> str:
    return gpu_check.fmt(value, digits, missing="-")


def write_outputs(out: Path, report: dict[str, Any]) -> None:
    """``gpu_recurring.json``, ``.csv`` (one row per recurrence, every field) and ``.md``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_recurring.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    rows = report["recurrences"]
    with (out / "gpu_recurring.csv").open("w", newline="") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    (out / "gpu_recurring.md").write_text(markdown(report))


def markdown(report: dict[str, Any]) -> str:
    simulated = report["measurement"] == "simulated"
    tag = " (SIMULATED: fake NVML on the CPU, not a GPU)" if simulated else " (measured)"
    job, device = report["job"], report["device"]
    lines = [
        f"# gpu_recurring{tag}",
        "",
        f"{report['generated_at']} · host {report['host']} · {device['model']} · driver "
        f"{device['driver']} · torch {report['torch']} (CUDA {report['cuda']}) · "
        f"{report['elapsed_s']:.0f} s · power limit {report['power_limit_w_before']} W before, "
        f"{report['power_limit_w_after']} W after · NVML setting changes attempted: "
        f"{len(report['nvml_changes_attempted'])}",
        "",
        f"Job: {job['model']}, {job['train_samples']} fresh training samples a recurrence, "
        f"batch sizes {job['batch_sizes']} (default {job['default_batch_size']}), target "
        f"accuracy {job['target_accuracy']}, at most {job['max_epochs']} epochs; eta "
        f"{job['eta']}, beta {job['beta']}, exploration budget {job['exploration_budget']} "
        f"(arm zeus); power-limit mode {job['power_limit_mode']}, SQLite store.",
        "",
        f"## Cumulative energy against Default{tag}",
        "",
        *_summary_lines(report["summary"], report["arms"]),
        "",
        f"## Per recurrence{tag}",
        "",
        "GPU energy from the counter over every try's training; cost in the job's units; "
        "Default's cost as the budget estimates it and the budget left after the recurrence "
        "(Default runs' worth), from the recurrence's result; counter over sampled energy "
        "(power every 10 ms, integrated) over the same windows; position: which of the arms "
        "ran the recurrence first, second, ...",
    ]
    for arm, label in report["arms"].items():
        lines += ["", f"**{arm}**: {label}", "", *_arm_table(arm, report["recurrences"])]
    return "\n".join(lines) + "\n"


def _arm_table(arm: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| # | position | batch (tried) | phase | epochs | s | J | cost | Default's cost "
        "(budget) | budget left | counter/sampled | cumulative J | x Default |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tried = r[f"{arm}_tried"]
        lines.append(
            f"| {r['recurrence']} | {r['order'].split().index(arm) + 1} | "
            f"{r[f'{arm}_batch_size']}{f' ({tried})' if ' ' in tried else ''} | "
            f"{r[f'{arm}_phase']} | {r[f'{arm}_epochs']} | {_num(r[f'{arm}_time_s'])} | "
            f"{_num(r[f'{arm}_energy_j'])} | {_num(r[f'{arm}_cost'])} | "
            f"{_num(r[f'{arm}_budget_default_cost'])} | "
            f"{_num(r[f'{arm}_budget_left_runs'], 3)} | "
            f"{_num(r[f'{arm}_counter_over_sampled'])} | "
            f"{_num(r[f'{arm}_cumulative_energy_j'], 5)} | "
            f"{_num(r[f'{arm}_cumulative_over_default'], 3)} |"
        )
    return lines


def _summary_lines(s: dict[str, Any], labels: dict[str, str]) -> list[str]:
    if not s["recurrences"]:
        return ["No recurrence ran." + (f" {s['stopped']}." if s["stopped"] else "")]
    lines = [
        f"After {s['recurrences']} recurrences, each arm on the same data:",
        "",
        "| arm | GPU energy J | x Default | time s | cost | batch sizes | sizes tried |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, a in s["arms"].items():
        lines.append(
            f"| {labels[arm]} | {a['energy_j']:.5g} | **{a['energy_over_default']:.3f}** | "
            f"{a['time_s']:.4g} | {a['cost']:.5g} | {' '.join(map(str, a['batch_sizes']))} | "
            f"{' '.join(map(str, a['tried']))} |"
        )
    ratio = s["counter_over_sampled"]
    if ratio:
        lines += [
            "",
            f"Counter over sampled energy, every try's training: {ratio['min']:.4f} to "
            f"{ratio['max']:.4f} (median {ratio['median']:.4f}).",
        ]
    if s["stopped"]:
        lines += ["", f"**Stopped early**: {s['stopped']}."]
    return lines


# --- the GPU, read only -----------------------------------------------------------------------
@dataclass
class OpenedGPU:
    """The GPU measured two ways (its energy counter; its power sampled and integrated), NVML
    behind the read-only proxy, and the fake NVML under it with ``--simulated``."""

    nvml: Any
    fake: Any
    index: int
    device: str
    """torch's device: ``cuda:N``, or ``cpu`` when simulated."""
    counter: Any
    sampled: Any

    def close(self) -> None:
        self.sampled.close()
        self.counter.close()


def open_gpu(torch: Any, args: argparse.Namespace, sizes: Sizes) -> OpenedGPU:
    from zeus_airflow.core.devices.nvml import NVMLGPUs

    fake, clock = None, time.monotonic
    if args.simulated:
        from zeus_airflow.testing import FakeGPUSpec, FakeNVML

        # Its time is this process's CPU time, so that other processes on a shared machine
        # change no figure; it draws 90 % of its limit all along.
        clock = time.process_time
        fake = FakeNVML(
            1,
            FakeGPUSpec(
                model="NVIDIA H100 80GB HBM3 (simulated)",
                min_limit_mw=200_000,
                max_limit_mw=700_000,
                energy_update_s=sizes.simulated_counter_update_s,
            ),
            clock=clock,
        )
        nvml, device = gpu_check.ReadOnlyNVML(fake), "cpu"
        torch.set_num_threads(1)  # CI machines are small and shared: no oversubscription
    else:
        import pynvml

        if not torch.cuda.is_available():
            raise SystemExit(
                "gpu_recurring: torch sees no CUDA GPU; run with --simulated to try the "
                "script on the CPU"
            )
        nvml, device = gpu_check.ReadOnlyNVML(pynvml), f"cuda:{args.gpu}"
    index = gpu_check.nvml_index(nvml, args.gpu, "gpu_recurring")
    counter = NVMLGPUs([index], nvml=nvml, clock=clock)
    if fake is not None:  # the store labels every trial's figures with this
        counter.measurement = "simulated"
    try:
        sampled = NVMLGPUs(
            [index],
            nvml=nvml,
            clock=clock,
            energy_source="sampling",
            sample_interval_s=SAMPLE_INTERVAL_S,
        )
    except BaseException:
        counter.close()
        raise
    return OpenedGPU(nvml, fake, index, device, counter, sampled)


# --- main -------------------------------------------------------------------------------------
def _arm_names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in ARMS]
    if unknown or "default" not in names:
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: expected a comma-separated list of {', '.join(ARMS)} "
            "that includes default (the baseline)"
        )
    return names


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected a number >= 0")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_recurring.py",
        description=(
            "Recurring training on one NVIDIA GPU through the real engine, Zeus against "
            "Default interleaved, without changing any GPU setting (NVML reads and measure "
            "mode only). Needs torch (with CUDA) and nvidia-ml-py, plus SQLAlchemy, alembic, "
            "numpy and psutil; never Airflow. Writes gpu_recurring.csv, .md, .json and the "
            "SQLite store gpu_recurring.db to --out."
        ),
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("gpu_recurring_results"),
        help="folder for the results (default: ./gpu_recurring_results); it must not hold "
        "an earlier run's store",
    )
    parser.add_argument(
        "--gpu",
        type=int,
        default=0,
        help="CUDA device number of the GPU, as CUDA numbers the visible GPUs (default 0)",
    )
    parser.add_argument(
        "--simulated",
        action="store_true",
        help="run on the CPU against the fake NVML (every figure labelled simulated)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a tiny job: seconds on a CPU (for the suite)"
    )
    parser.add_argument(
        "--recurrences", type=int, default=None, help="recurrences (default 12; at least 1)"
    )
    parser.add_argument(
        "--arms",
        type=_arm_names,
        default=tuple(ARMS),
        help=f"the arms, comma-separated (default {','.join(ARMS)}): "
        + "; ".join(f"{name}: {arm.label}" for name, arm in ARMS.items()),
    )
    parser.add_argument(
        "--exploration-budget",
        type=_fraction,
        default=None,
        help="the zeus arm's exploration budget, a fraction of Default's cost (default: "
        "the product's)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help=f"time budget in s: no recurrence starts that would likely end past it "
        f"(default {BUDGET_S:g} on a GPU, within 5 minutes; none with --simulated)",
    )
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked before anything runs (each error names its option)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.recurrences is not None and args.recurrences < 1:
        parser.error(f"--recurrences={args.recurrences} is invalid: expected at least 1")
    if args.budget_s is None:
        args.budget_s = math.inf if args.simulated else BUDGET_S
    if not args.budget_s > 0:
        parser.error(f"--budget-s={args.budget_s} is invalid: expected seconds > 0")
    if (args.out / "gpu_recurring.db").exists():
        parser.error(
            f"--out={args.out} is invalid: it holds an earlier run's store "
            "(gpu_recurring.db); name a new folder, or remove it"
        )
    return args


def report_head(
    torch: Any, args: argparse.Namespace, sizes: Sizes, gpu: OpenedGPU, config: Any
) -> dict[str, Any]:
    """What stays the same through the run: the device, the versions, the job."""
    return {
        "measurement": "simulated" if args.simulated else "measured",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if gpu.device != "cpu" else None,
        "device": gpu_check.inventory(gpu.nvml, gpu.index),
        "energy_source": gpu.counter.energy_source,
        "job": {
            "model": f"ResNet-style CNN, width {sizes.width}, {sizes.image_px} px images, "
            f"{sizes.classes} classes",
            "train_samples": sizes.train_samples,
            "batch_sizes": list(config.batch_sizes),
            "default_batch_size": config.default_batch_size,
            "target_accuracy": config.target_metric,
            "max_epochs": config.max_epochs,
            "eta": config.eta,
            "beta": config.beta,
            "exploration_budget": config.exploration_budget,
            "power_limit_mode": config.profiler.mode,
        },
        "arms": {arm: ARMS[arm].label for arm in args.arms},
        "sizes": asdict(sizes),
        "power_limit_w_before": gpu.counter.get_power_limits_w()[0],
    }


def measure(
    torch: Any, args: argparse.Namespace, sizes: Sizes, gpu: OpenedGPU, started_s: float
) -> dict[str, Any]:
    """Every recurrence of every arm; the report, also written after each recurrence."""
    from zeus_airflow.core.decide.policy import POLICIES
    from zeus_airflow.core.store.sql import SQLStore
    from zeus_airflow.core.train.engine import Engine

    configs = {arm: job_config(sizes, arm, args.exploration_budget) for arm in args.arms}
    assert all(c.profiler.mode == MEASURE_ONLY_MODE for c in configs.values())
    args.out.mkdir(parents=True, exist_ok=True)
    store = SQLStore(f"sqlite:///{args.out / 'gpu_recurring.db'}", create_schema=True)
    log = logging.getLogger("gpu_recurring.engine")
    log.setLevel(logging.WARNING)
    engines = {
        arm: Engine(
            store,
            gpu.counter,
            config,
            POLICIES[ARMS[arm].policy](),
            seed=1,
            heartbeat_s=None,
            log=log,
        )
        for arm, config in configs.items()
    }
    head = report_head(torch, args, sizes, gpu, job_config(sizes, "zeus", args.exploration_budget))

    def report(rows: list[dict[str, Any]], stopped: str | None) -> dict[str, Any]:
        return {
            **head,
            "power_limit_w_after": gpu.counter.get_power_limits_w()[0],
            "nvml_changes_attempted": list(gpu.nvml.attempted),
            "fake_nvml_set_calls": None if gpu.fake is None else len(gpu.fake.set_calls),
            "elapsed_s": time.monotonic() - started_s,
            "recurrences": rows,
            "summary": summary(rows, list(args.arms), stopped),
        }

    try:
        rows, stopped = run_recurrences(
            torch,
            sizes,
            Arms(engines, CounterAndSampled(gpu.counter, gpu.sampled)),
            gpu.device,
            started_s + args.budget_s,
            lambda rows, stopped: write_outputs(args.out, report(rows, stopped)),
        )
    finally:
        store.engine.dispose()
    return report(rows, stopped)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started_s = time.monotonic()
    sizes = QUICK if args.quick else Sizes()
    if args.recurrences is not None:
        sizes = replace(sizes, recurrences=args.recurrences)
    import torch  # after --help, which needs no torch

    gpu = open_gpu(torch, args, sizes)
    try:
        report = measure(torch, args, sizes, gpu, started_s)
    finally:
        gpu.close()
    write_outputs(args.out, report)
    s = report["summary"]
    _progress(
        f"wrote {args.out}/gpu_recurring.md, .csv, .json and .db in {report['elapsed_s']:.0f} s "
        f"({report['measurement']}): {s['recurrences']} recurrences; energy over Default's: "
        + ", ".join(f"{arm} {a['energy_over_default']:.3f}" for arm, a in s["arms"].items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
