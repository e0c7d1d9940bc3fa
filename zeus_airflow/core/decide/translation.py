"""Mixed GPU fleets: carrying what a job learned on one GPU model over to another (paper §7).

A run's cost is Epochs(b) x EpochCost(b): epochs to target do not depend on the GPU, the cost
of an epoch does, and the profiler measures it per (batch size, GPU model, GPU count). So a
cost observed on model A translates to model B by the ratio of the per-step costs both
profiles measured for that batch size. Sizes not yet profiled on B cannot be translated: the
policy runs each of them once on B (``calibrate``), cheapest on A first, instead of pruning
the whole batch-size range again as a fresh job would.

:func:`with_other_fleets` is this step of turning a decision's stored state into what the
policy reads (``core/decide/snapshot.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zeus_airflow.core.common.config import ProfilerConfig
from zeus_airflow.core.common.limit_search import LimitObjective
from zeus_airflow.core.domain import (
    ArmStats,
    FleetKey,
    ForeignObservation,
    JobState,
    PowerProfile,
)


@dataclass(frozen=True)
class Translation:
    """Observations translated to this fleet key, and what could not be translated."""

    costs: dict[int, list[tuple[float, bool]]]
    """Per batch size, (translated cost, reached target), newest first."""
    untranslated_mean_cost: dict[int, float]
    """Per batch size with no profile here yet: the mean cost it had elsewhere."""


def training_cost_per_step(
    profile: PowerProfile, profiler: ProfilerConfig, eta: float
) -> float | None:
    """Cost of one step at the limit training runs at after profiling; None if incomplete.

    MAXPOWER is the profiled group's: its highest candidate limit times its GPU count.
    """
    if not profile.measurements:
        return None
    max_power = float(max(profile.candidates_w) * profile.gpu_count)
    if not profile.converged(LimitObjective.of(profiler, eta, max_power)):
        return None
    limit = (
        profile.optimum_w(profiler, eta, max_power)
        if profiler.mode == "optimize"
        else max(profile.measurements)
    )
    return profile.measurements[limit].cost_per_step(eta, max_power)


def pricing_cost_per_step(profile: PowerProfile, eta: float) -> float | None:
    """Cost of one step at the limit sizes are priced at against each other
    (``budget.cost_range``); None until it is measured. Where limits move, the profile's
    highest candidate, the first one it measures (Default's): known a few dozen steps into a
    size's first run, long before its profile is complete. Where they cannot (measure mode),
    the limit the GPUs train at, which every size shares: a profile's only measurement
    (``profiler.PowerLimitProfiler._price_at_current_limit``)."""
    if not profile.candidates_w:
        return None
    measured = profile.measurements.get(max(profile.candidates_w))
    if measured is None and len(profile.measurements) == 1:
        (measured,) = profile.measurements.values()
    if measured is None:
        return None
    return measured.cost_per_step(eta, float(max(profile.candidates_w) * profile.gpu_count))


def translate(
    here: FleetKey,
    foreign: Iterable[ForeignObservation],
    profiles: Mapping[tuple[FleetKey, int], PowerProfile],
    profiler: ProfilerConfig,
    eta: float,
) -> Translation:
    """Translate other fleet keys' observations into this one's cost units."""
    costs: dict[int, list[tuple[float, bool]]] = {}
    untranslated: dict[int, list[float]] = {}
    ratios: dict[tuple[FleetKey, int], float | None] = {}
    for obs in foreign:
        key = (obs.fleet, obs.batch_size)
        if key not in ratios:
            ratios[key] = _ratio(
                profiles.get((here, obs.batch_size)), profiles.get(key), profiler, eta
            )
        ratio = ratios[key]
        if ratio is None:
            untranslated.setdefault(obs.batch_size, []).append(obs.cost)
        else:
            costs.setdefault(obs.batch_size, []).append((obs.cost * ratio, obs.reached_target))
    return Translation(
        costs, {b: sum(c) / len(c) for b, c in untranslated.items() if b not in costs}
    )


def _ratio(
    here: PowerProfile | None, there: PowerProfile | None, profiler: ProfilerConfig, eta: float
) -> float | None:
    if here is None or there is None:
        return None
    cost_here = training_cost_per_step(here, profiler, eta)
    cost_there = training_cost_per_step(there, profiler, eta)
    if cost_here is None or not cost_there:
        return None
    return cost_here / cost_there


def with_other_fleets(
    state: JobState,
    observations: Mapping[int, ArmStats],
    successes: Mapping[int, tuple[float, int]],
) -> tuple[Mapping[int, ArmStats], Mapping[int, tuple[float, int]], dict[int, float]]:
    """This setup's ``observations`` and ``successes`` with the runs of other GPU setups
    translated into its cost units and added to arms whose window has room for them, and
    the mean cost elsewhere of each size that cannot be translated yet."""
    here = state.here
    if all(key == here for key, _ in state.profiles):  # the job never moved
        return observations, successes, {}
    config = state.job.config
    window = config.window_size
    translation = translate(here, state.foreign, state.profiles, config.profiler, config.eta)
    merged, merged_successes = dict(observations), dict(successes)
    for b, translated in translation.costs.items():
        own = merged.get(b, ArmStats(0, 0.0, 0.0))
        room = len(translated) if window is None else max(window - own.count, 0)
        kept = translated[:room]
        if kept:
            merged[b] = own.merge(ArmStats.of([cost for cost, _ in kept]))
            for cost, reached in kept:
                if reached:
                    total, n = merged_successes.get(b, (0.0, 0))
                    merged_successes[b] = (total + cost, n + 1)
    foreign_costs = {b: c for b, c in translation.untranslated_mean_cost.items() if b not in merged}
    return merged, merged_successes, foreign_costs
