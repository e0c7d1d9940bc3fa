"""The Zeus paper's measured traces: epochs to target and power per epoch.

``summary_train.csv`` says how many epochs a (workload, batch size, seed) needed to reach the
target; ``summary_power_{gpu}.csv`` gives the time and average power of one epoch at each
(batch size, power limit). A :class:`WorkloadTrace` joins the two for one GPU and workload.
The V100 and A40 traces ship in the package (:data:`PACKAGED_TRACES`; source and licence in
its README.md).
"""

from __future__ import annotations

import csv
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from zeus_airflow.core.common.config import ConfigError

PACKAGED_TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
TRACES_ENV = "ZEUS_TRACES_DIR"


def resolve_traces_dir(explicit: str | Path | None = None) -> Path:
    """The paper's traces folder: ``explicit``, else ``$ZEUS_TRACES_DIR``, else the traces
    shipped in the package. Every ``--traces`` option and ``traces_dir`` parameter ends here."""
    chosen = explicit or os.environ.get(TRACES_ENV)
    return Path(chosen) if chosen else PACKAGED_TRACES


"""The paper's V100 and A40 traces as shipped in the package: the default folder, so that an
install without a checkout beside it can replay and simulate."""


@dataclass(frozen=True)
class Workload:
    """A paper workload (Table 1) with the settings upstream Zeus's simulator used."""

    name: str
    default_batch_size: int
    target_metric: float
    higher_is_better: bool
    max_epochs: int
    train_samples: int
    """Training samples per epoch. Only sets how many steps an epoch has in replay (the traces
    give time per epoch); approximate sizes of the public datasets."""


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("librispeech", 192, 40.0, False, 16, 281_241),
        Workload("squad", 32, 84.0, True, 6, 88_524),
        Workload("sentiment140", 128, 0.84, True, 10, 1_280_000),
        Workload("imagenet", 256, 0.65, True, 100, 1_281_167),
        Workload("cifar100", 1024, 0.6, True, 100, 50_000),
        Workload("movielens-1m", 1024, 0.41, True, 100, 4_970_845),
    )
}


@dataclass(frozen=True)
class EpochPoint:
    """One epoch at one (batch size, power limit) on the traced GPU."""

    time_s: float
    avg_power_w: float


@dataclass(frozen=True)
class WorkloadTrace:
    """Everything the replay needs about one workload on one GPU model."""

    gpu: str
    workload: Workload
    batch_sizes: tuple[int, ...]
    """Feasible batch sizes: those present in both the training and the power trace."""
    power_limits_w: tuple[int, ...]
    epochs: dict[tuple[int, int], EpochPoint]
    target_epochs: dict[int, tuple[float, ...]]
    """Per batch size, epochs each traced seed needed; ``inf`` where it never reached."""

    @property
    def default_batch_size(self) -> int:
        """The paper's b0, capped at the largest batch size this GPU's trace has."""
        b0 = self.workload.default_batch_size
        return b0 if b0 in self.batch_sizes else max(b for b in self.batch_sizes if b <= b0)

    def steps_per_epoch(self, batch_size: int) -> int:
        return math.ceil(self.workload.train_samples / batch_size)

    def epoch(self, batch_size: int, power_limit_w: float) -> EpochPoint:
        """Time and power of one epoch; limits between traced ones are interpolated."""
        limits = self.power_limits_w
        if power_limit_w <= limits[0]:
            return self.epochs[(batch_size, limits[0])]
        if power_limit_w >= limits[-1]:
            return self.epochs[(batch_size, limits[-1])]
        upper = next(p for p in limits if p >= power_limit_w)
        lower = max(p for p in limits if p <= power_limit_w)
        if upper == lower:
            return self.epochs[(batch_size, upper)]
        frac = (power_limit_w - lower) / (upper - lower)
        lo, hi = self.epochs[(batch_size, lower)], self.epochs[(batch_size, upper)]
        return EpochPoint(
            lo.time_s + frac * (hi.time_s - lo.time_s),
            lo.avg_power_w + frac * (hi.avg_power_w - lo.avg_power_w),
        )

    def expected_epochs(self, batch_size: int) -> float:
        """Mean epochs to target over the traced seeds; ``inf`` if any seed never reached it
        within max_epochs (such a batch size cannot be the optimum)."""
        runs = self.target_epochs[batch_size]
        if any(e > self.workload.max_epochs for e in runs):
            return math.inf
        return sum(runs) / len(runs)


def available_gpus(traces_dir: Path) -> list[str]:
    return sorted(
        p.stem.removeprefix("summary_power_") for p in Path(traces_dir).glob("summary_power_*.csv")
    )


def load_workload_trace(traces_dir: str | Path, gpu: str, workload: str) -> WorkloadTrace:
    """Join the training and power traces of one workload on one GPU."""
    traces_dir = Path(traces_dir)
    if not (traces_dir / "summary_train.csv").is_file():
        raise ConfigError(
            f"traces={str(traces_dir)!r} is invalid: expected a folder with "
            "summary_train.csv and summary_power_<gpu>.csv"
        )
    gpus = available_gpus(traces_dir)
    if gpu not in gpus:
        raise ConfigError(
            f"gpu={gpu!r} is invalid: expected one of {', '.join(gpus)} "
            f"(power traces in {traces_dir})"
        )
    if workload not in WORKLOADS:
        raise ConfigError(
            f"workload={workload!r} is invalid: expected one of {', '.join(sorted(WORKLOADS))}"
        )
    try:
        return _load(traces_dir.resolve(), gpu, workload)
    except (KeyError, ValueError, UnicodeDecodeError, csv.Error) as err:
        if isinstance(err, ConfigError):
            raise
        # A file that is not a trace: one line naming it, never a parser's traceback.
        problem = f"no column {err}" if isinstance(err, KeyError) else str(err)
        raise ConfigError(
            f"traces={str(traces_dir)!r} is invalid: its summary_train.csv or "
            f"summary_power_{gpu}.csv is not one of the paper's traces "
            f"({type(err).__name__}: {problem}); expected their columns (dataset, "
            "batch_size, target_metric, target_epoch, optimizer, power_limit, "
            "time_per_epoch, average_power)"
        ) from None


@cache
def _load(traces_dir: Path, gpu: str, name: str) -> WorkloadTrace:
    workload = WORKLOADS[name]
    target_epochs: dict[int, list[float]] = defaultdict(list)
    optimizer = None
    with open(traces_dir / "summary_train.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["dataset"] != name or float(row["target_metric"]) != workload.target_metric:
                continue
            optimizer = row["optimizer"]
            epoch = float(row["target_epoch"])
            target_epochs[int(row["batch_size"])].append(math.inf if math.isnan(epoch) else epoch)
    epochs: dict[tuple[int, int], EpochPoint] = {}
    with open(traces_dir / f"summary_power_{gpu}.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["dataset"] != name or row["optimizer"] != optimizer:
                continue
            epochs[(int(row["batch_size"]), int(row["power_limit"]))] = EpochPoint(
                float(row["time_per_epoch"]), float(row["average_power"])
            )
    limits = tuple(sorted({p for _, p in epochs}))
    sizes = tuple(sorted(b for b in target_epochs if all((b, p) in epochs for p in limits)))
    if not sizes:
        raise ConfigError(f"workload={name!r} has no batch size traced on gpu={gpu!r}")
    return WorkloadTrace(
        gpu=gpu,
        workload=workload,
        batch_sizes=sizes,
        power_limits_w=limits,
        epochs=epochs,
        target_epochs={b: tuple(target_epochs[b]) for b in sizes},
    )
