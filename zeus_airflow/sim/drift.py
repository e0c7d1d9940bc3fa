"""Data drift on the replay GPU: a workload whose epochs-to-target switch mid-run (paper §6.4).

Drift model. The paper's traces give, per batch size b, the epochs a run needs to reach the
target. Data drift changes that curve. We follow the empirical model of large-batch training
(McCandlish et al., 2018: examples to target ``E = E_min (1 + B / B_noise)``): harder data
needs more examples at every batch size (``E_min`` grows) and has a larger gradient-noise
scale (``B_noise`` grows), so large batches lose less. After the switch a run at batch size b
needs the epochs of a traced run at batch size ``b / batch_scale``, times ``difficulty``:

    epochs_after(b) ~ difficulty x epochs_before(nearest traced size to b / batch_scale)

("nearest" in log2; below the smallest traced size, the smallest one's). Time and power per
epoch do not change (the same model on the same GPU), so the optimum batch size moves up and
the old optimum gets dearer: the signal a windowed posterior can react to. On a V100
cifar100 with the defaults (2, 1.5) the optimum moves from 128 to 256.

Metrics. A recurrence's regret is its cost minus the expected cost of the optimal (b, p) of
the phase it ran in. After the switch, the *adaptation delay* is the number of recurrences
until a run of ``horizon`` consecutive recurrences picks the new optimum batch size in at
least ``share`` of them; the *extra cost* is the cumulative regret after the switch. Every
figure is replayed from the paper's traces.

Where another size costs almost what the new optimum does, no policy can tell the two apart
from the runs it gets: a run's cost varies with the epochs it needs (the traced seeds), so a
gap of 1 % of the cost may take hundreds of runs of each size to show. Such a size is
*indistinguishable* from the optimum when a two-sample test (5 %, two-sided, 80 % power)
would need more runs of each than there are recurrences after the switch; the *near
adaptation delay* counts picks of the optimum or of those sizes.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zeus_airflow.core.common.config import (
    ConfigError,
    check_int,
    check_int_below,
    declared_default,
)
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.decide.policy import ZeusPolicy
from zeus_airflow.core.decide.walk import pruning_state
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import EXPLORATION_PHASES, ExplorationStep, RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.sim.simulator import (
    Expected,
    Recurrences,
    SimulationSpec,
    at_best_limit,
    job_config,
    oracle,
)

DEFAULT_BATCH_SCALE = 2.0
DEFAULT_DIFFICULTY = 1.5
ADAPT_HORIZON = 10
"""Consecutive recurrences over which the new optimum's share is measured."""
ADAPT_SHARE = 0.8
TEST_Z = 1.96 + 0.84
"""z of a two-sided 5 % test plus z of 80 % power: the runs per size a comparison needs are
``TEST_Z**2 * (sd_a**2 + sd_b**2) / gap**2``."""


@dataclass(frozen=True)
class Drift:
    """How the epochs-to-target curve changes at the switch (see the module docstring)."""

    batch_scale: float = DEFAULT_BATCH_SCALE
    difficulty: float = DEFAULT_DIFFICULTY

    def __post_init__(self) -> None:
        for name, value in (("batch_scale", self.batch_scale), ("difficulty", self.difficulty)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name}={value!r} is invalid: expected a number > 0")

    def apply(self, trace: WorkloadTrace) -> WorkloadTrace:
        """The same workload after the drift: only ``target_epochs`` change."""
        sizes = trace.batch_sizes

        def source(b: int) -> int:
            wanted = math.log2(b / self.batch_scale)
            return min(sizes, key=lambda s: abs(math.log2(s) - wanted))

        after = {
            b: tuple(e * self.difficulty for e in trace.target_epochs[source(b)]) for b in sizes
        }
        return dataclasses.replace(trace, target_epochs=after)


@dataclass(frozen=True)
class DriftSpec:
    """One drift run: the Zeus policy with one posterior window on one seed."""

    gpu: str
    workload: str
    traces_dir: str
    seed: int
    switch_at: int
    """Index of the first recurrence after the drift (0-based)."""
    recurrences: int
    drift: Drift = field(default_factory=Drift)
    job: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Job parameters by the operator's names (``config.JOB_PARAMETERS``): above all
    ``window_size`` and ``drift_detection``, which is off here unless set (the runs compare
    posterior windows); ``exploration_budget=None`` explores as the paper does (the tests of
    the windows' adaptation use it, so that the budget's pace does not mix in)."""

    def __post_init__(self) -> None:
        check_int("recurrences", self.recurrences, minimum=2)
        check_int_below(
            "switch_at", self.switch_at, minimum=1, bound="recurrences", below=self.recurrences
        )

    @property
    def parameters(self) -> dict[str, Any]:
        """The job parameters the run sets: ``job``, drift detection off unless set there."""
        return {"drift_detection": False, **self.job}

    def parameter(self, name: str) -> Any:
        """Job parameter ``name`` as the run sets it, else the declared default."""
        return self.parameters.get(name, declared_default(name))

    @property
    def label(self) -> str:
        size = self.parameter("window_size")
        window = "no window" if size is None else f"window {size}"
        if not self.parameter("drift_detection"):
            return window
        return "detection" if size is None else f"detection, {window}"

    def simulation_spec(self) -> SimulationSpec:
        return SimulationSpec(
            policy="zeus",
            gpu=self.gpu,
            workload=self.workload,
            seed=self.seed,
            traces_dir=self.traces_dir,
            recurrences=self.recurrences,
            job=self.parameters,
        )


@dataclass(frozen=True)
class Optima:
    """The optimal (b, p) and its expected cost before and after the switch."""

    before: Expected
    after: Expected
    indistinguishable_after: tuple[int, ...] = ()
    """Other batch sizes no test could tell from the new optimum in the recurrences after the
    switch (see the module docstring)."""


def run_costs(trace: WorkloadTrace, expected_run: Expected) -> list[float]:
    """What one run of ``expected_run``'s (b, p) costs for each traced seed: the replay trains
    whole epochs, so a seed that needs 4.2 epochs costs five."""
    per_epoch = expected_run.cost / trace.expected_epochs(expected_run.batch_size)
    return [math.ceil(e) * per_epoch for e in trace.target_epochs[expected_run.batch_size]]


def runs_to_separate(a: list[float], b: list[float]) -> float:
    """Runs of each a two-sample test needs to tell two sizes' mean costs apart (inf when the
    means are equal)."""
    gap = abs(statistics.fmean(a) - statistics.fmean(b))
    spread = statistics.pvariance(a) + statistics.pvariance(b)
    return math.inf if gap == 0 else TEST_Z**2 * spread / gap**2


def runs_to_tell_apart(trace: WorkloadTrace, optimum: Expected, eta: float) -> dict[int, float]:
    """Per other feasible batch size (at its best limit): the runs of each a test needs to tell
    its mean cost from ``optimum``'s."""
    best = run_costs(trace, optimum)
    needed = {}
    for b in trace.batch_sizes:
        if b != optimum.batch_size and math.isfinite(trace.expected_epochs(b)):
            rival = run_costs(trace, at_best_limit(trace, b, eta))
            needed[b] = runs_to_separate(best, rival)
    return needed


def indistinguishable(
    trace: WorkloadTrace, optimum: Expected, eta: float, recurrences: int
) -> tuple[int, ...]:
    """The sizes that ``recurrences`` runs of each could not tell from ``optimum``."""
    return tuple(
        b for b, runs in runs_to_tell_apart(trace, optimum, eta).items() if runs > recurrences
    )


def optima(spec: DriftSpec) -> Optima:
    """Brute-force optima of both phases; raises when the drift does not move the batch size
    (then the experiment could not tell adaptation from standing still)."""
    trace = load_workload_trace(Path(spec.traces_dir), spec.gpu, spec.workload)
    drifted = spec.drift.apply(trace)
    if not any(math.isfinite(drifted.expected_epochs(b)) for b in drifted.batch_sizes):
        raise ConfigError(
            f"difficulty={spec.drift.difficulty} is invalid for {spec.gpu} {spec.workload}: "
            f"no batch size would reach the target within max_epochs="
            f"{trace.workload.max_epochs}; expected a smaller difficulty"
        )
    eta = spec.parameter("eta")
    before, after = oracle(trace, eta), oracle(drifted, eta)
    if after.batch_size == before.batch_size:
        raise ConfigError(
            f"batch_scale={spec.drift.batch_scale}, difficulty={spec.drift.difficulty} is "
            f"invalid for {spec.gpu} {spec.workload}: the optimal batch size stays "
            f"{before.batch_size}; expected a drift that moves it (try another batch_scale)"
        )
    return Optima(
        before,
        after,
        indistinguishable(drifted, after, eta, spec.recurrences - spec.switch_at),
    )


@dataclass
class DriftResult(Recurrences):
    """Per-recurrence figures of one drift run (replayed)."""

    spec: DriftSpec
    optima: Optima
    survivors_at_switch: tuple[int, ...] = ()
    """Batch sizes left to Thompson sampling when the drift came (pruned ones never return)."""

    @property
    def can_adapt(self) -> bool:
        """Whether the new optimum survived pruning, so sampling can still pick it."""
        return self.optima.after.batch_size in self.survivors_at_switch

    @property
    def regret(self) -> list[float]:
        """Cost minus the expected cost of the optimum of the recurrence's phase."""
        switch = self.spec.switch_at
        return [
            c - (self.optima.before.cost if i < switch else self.optima.after.cost)
            for i, c in enumerate(self.cost)
        ]

    @property
    def regret_after_switch(self) -> float:
        """The extra cost of adapting: cumulative regret from the switch to the end."""
        return sum(self.regret[self.spec.switch_at :])

    @property
    def adaptation_delay(self) -> int | None:
        return adaptation_delay(
            self.batch_size[self.spec.switch_at :], self.optima.after.batch_size
        )

    @property
    def near_adaptation_delay(self) -> int | None:
        """As ``adaptation_delay``, a pick of an indistinguishable size counting as a hit."""
        return adaptation_delay(
            self.batch_size[self.spec.switch_at :],
            self.optima.after.batch_size,
            also=self.optima.indistinguishable_after,
        )


def adaptation_delay(
    chosen: list[int],
    optimum: int,
    horizon: int = ADAPT_HORIZON,
    share: float = ADAPT_SHARE,
    also: tuple[int, ...] = (),
) -> int | None:
    """Recurrences after the switch until ``horizon`` consecutive ones pick ``optimum`` (or a
    size in ``also``) in at least ``share`` of them; None when that never happens within
    ``chosen``."""
    hits = [b == optimum or b in also for b in chosen]
    for start in range(len(hits) - horizon + 1):
        if sum(hits[start : start + horizon]) >= share * horizon:
            return start
    return None


def run_drift(spec: DriftSpec) -> DriftResult:
    """Run the real engine on the replay GPU, switching the epochs curve at ``switch_at``."""
    trace = load_workload_trace(Path(spec.traces_dir), spec.gpu, spec.workload)
    result = DriftResult(spec, optima(spec))
    drifted = spec.drift.apply(trace)
    gpu = ReplayGPU(trace)
    quiet = logging.getLogger("zeus_airflow.sim.drift")
    quiet.setLevel(logging.ERROR)
    engine = Engine(
        SQLStore.in_memory(),
        gpu,
        job_config(trace, spec.simulation_spec()),
        ZeusPolicy(),
        seed=spec.seed,
        heartbeat_s=None,
        log=quiet,
    )
    train = ReplayTraining(gpu, seed=spec.seed)
    exploration: list[ExplorationStep] = []
    started = time.perf_counter()
    for index in range(spec.recurrences):
        if index == spec.switch_at:
            gpu.trace = drifted  # the replay now draws epochs-to-target from the drifted curve
            walk = tuple(s for s in exploration if s.stop_reason != "budget_cap")
            deferred = tuple(s for s in exploration if s.stop_reason == "budget_cap")
            result.survivors_at_switch = pruning_state(
                engine.config, walk, deferred=deferred
            ).survivors
        train.recurrence = index
        outcome = engine.run_recurrence(train, RecurrenceKey(run_id=f"recurrence-{index}"))
        exploration.extend(_exploration_steps(outcome, len(exploration)))
        result.record(outcome)
    result.wall_s = time.perf_counter() - started
    return result


def _exploration_steps(result: RecurrenceResult, before: int) -> list[ExplorationStep]:
    """The pruning walk's steps in a recurrence, as the store hands them to the policy (those
    stopped at the budget's cap among them: the walk defers their size), numbered in
    decision order after the ``before`` steps so far."""
    tries = [t for t in result.tries if t.phase in EXPLORATION_PHASES]
    return [
        ExplorationStep(
            t.outcome.batch_size,
            t.outcome.reached_target,
            t.outcome.cost,
            seq=before + i + 1,
            stop_reason=t.outcome.stop_reason,
        )
        for i, t in enumerate(tries)
    ]
