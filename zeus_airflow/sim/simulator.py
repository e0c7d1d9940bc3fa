"""Trace-driven simulation: the real engine, profiler and store on the replay GPU.

One simulation is one (policy, GPU, workload, seed): a fresh in-memory store, a replay GPU,
and ``recurrences`` calls of :meth:`Engine.run_recurrence`. Metrics follow the paper (§6.2):
energy and time of the last five recurrences over Default's expected per-recurrence value,
cumulative energy, time and regret, where a recurrence's regret is its cost (every try and
the profiling included) minus the expected cost of the best (batch size, power limit).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zeus_airflow.core.common.config import JobConfig, config_from_parameters
from zeus_airflow.core.common.cost import zeus_cost
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.decide.policy import POLICIES
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining

LAST_N = 5


@dataclass(frozen=True)
class SimulationSpec:
    policy: str
    gpu: str
    workload: str
    seed: int
    traces_dir: str
    recurrences: int | None = None
    """None: 2 x |batch sizes| x |power limits|, as in the paper."""
    job: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Job parameters by the operator's names (``config.JOB_PARAMETERS``, e.g. ``eta``,
    ``window_size``, ``exploration_budget=None`` to explore as the paper does); the trace
    gives the workload's (batch sizes, target, epochs), the others keep their defaults."""


@dataclass(frozen=True)
class Expected:
    """Expected energy (J), time (s) and cost of one recurrence of a fixed configuration."""

    batch_size: int
    power_limit_w: int
    energy_j: float
    time_s: float
    cost: float


@dataclass(kw_only=True)
class Recurrences:
    """What each recurrence chose and what it cost, in order (replayed). Energy in J, time in
    s, cost in J-equivalents."""

    batch_size: list[int] = field(default_factory=list)
    power_limit_w: list[int] = field(default_factory=list)
    energy_j: list[float] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    """The whole run's wall-clock time."""

    def record(self, recurrence: RecurrenceResult) -> None:
        self.batch_size.append(recurrence.batch_size)
        self.power_limit_w.append(recurrence.power_limit_w)
        self.energy_j.append(recurrence.energy_j)
        self.time_s.append(recurrence.time_s)
        self.cost.append(recurrence.cost)


@dataclass
class SimulationResult(Recurrences):
    spec: SimulationSpec
    recurrences: int
    default: Expected
    oracle: Expected

    @property
    def regret(self) -> list[float]:
        return [c - self.oracle.cost for c in self.cost]

    def row(self) -> dict[str, object]:
        """One CSV row (ratios are to Default's expected per-recurrence value)."""
        last_energy = sum(self.energy_j[-LAST_N:]) / len(self.energy_j[-LAST_N:])
        last_time = sum(self.time_s[-LAST_N:]) / len(self.time_s[-LAST_N:])
        return {
            "policy": self.spec.policy,
            "gpu": self.spec.gpu,
            "workload": self.spec.workload,
            "seed": self.spec.seed,
            "recurrences": self.recurrences,
            "last5_energy_ratio": round(last_energy / self.default.energy_j, 4),
            "last5_time_ratio": round(last_time / self.default.time_s, 4),
            "oracle_energy_ratio": round(self.oracle.energy_j / self.default.energy_j, 4),
            "oracle_time_ratio": round(self.oracle.time_s / self.default.time_s, 4),
            "cum_energy_j": round(sum(self.energy_j), 1),
            "cum_time_s": round(sum(self.time_s), 1),
            "cum_regret": round(sum(self.regret), 1),
            "wall_s": round(self.wall_s, 3),
            "oracle_batch_size": self.oracle.batch_size,
            "oracle_power_limit_w": self.oracle.power_limit_w,
            "final_batch_size": self.batch_size[-1],
            "final_power_limit_w": self.power_limit_w[-1],
            "measurement": "replayed",
        }


def expected(trace: WorkloadTrace, batch_size: int, power_limit_w: int, eta: float) -> Expected:
    epochs = trace.expected_epochs(batch_size)
    point = trace.epoch(batch_size, power_limit_w)
    energy, seconds = epochs * point.time_s * point.avg_power_w, epochs * point.time_s
    max_power = float(max(trace.power_limits_w))
    return Expected(
        batch_size, power_limit_w, energy, seconds, zeus_cost(energy, seconds, eta, max_power)
    )


def at_best_limit(trace: WorkloadTrace, batch_size: int, eta: float) -> Expected:
    """``batch_size`` at the traced power limit with the lowest expected cost."""
    return min(
        (expected(trace, batch_size, p, eta) for p in trace.power_limits_w), key=lambda e: e.cost
    )


def oracle(trace: WorkloadTrace, eta: float) -> Expected:
    """The brute-force optimum of expected cost over every traced (batch size, power limit)."""
    return min(
        (
            at_best_limit(trace, b, eta)
            for b in trace.batch_sizes
            if math.isfinite(trace.expected_epochs(b))
        ),
        key=lambda e: e.cost,
    )


def default_configuration(trace: WorkloadTrace, eta: float) -> Expected:
    return expected(trace, trace.default_batch_size, max(trace.power_limits_w), eta)


def job_config(trace: WorkloadTrace, spec: SimulationSpec) -> JobConfig:
    """The simulated job: the trace's workload with the spec's job parameters."""
    workload = trace.workload
    return config_from_parameters(
        f"sim.{spec.gpu}.{spec.workload}.{spec.policy}.{spec.seed}",
        {
            "batch_sizes": trace.batch_sizes,
            "default_batch_size": trace.default_batch_size,
            "target_metric": workload.target_metric,
            "max_epochs": workload.max_epochs,
            "higher_is_better": workload.higher_is_better,
            **spec.job,
        },
    )


def default_recurrences(trace: WorkloadTrace) -> int:
    return 2 * len(trace.batch_sizes) * len(trace.power_limits_w)


def simulate(spec: SimulationSpec) -> SimulationResult:
    """Run one simulation through the real engine."""
    trace = load_workload_trace(Path(spec.traces_dir), spec.gpu, spec.workload)
    if spec.policy not in POLICIES:
        raise ValueError(
            f"policy={spec.policy!r} is invalid: expected one of {', '.join(POLICIES)}"
        )
    recurrences = spec.recurrences or default_recurrences(trace)
    gpu = ReplayGPU(trace)
    quiet = logging.getLogger(f"zeus_airflow.sim.{spec.policy}")
    quiet.setLevel(logging.ERROR)
    config = job_config(trace, spec)
    engine = Engine(
        SQLStore.in_memory(),
        gpu,
        config,
        POLICIES[spec.policy](),
        seed=spec.seed,
        heartbeat_s=None,
        log=quiet,
    )
    train = ReplayTraining(gpu, seed=spec.seed)
    result = SimulationResult(
        spec, recurrences, default_configuration(trace, config.eta), oracle(trace, config.eta)
    )
    started = time.perf_counter()
    for index in range(recurrences):
        train.recurrence = index
        result.record(engine.run_recurrence(train, RecurrenceKey(f"recurrence-{index}")))
    result.wall_s = time.perf_counter() - started
    return result
