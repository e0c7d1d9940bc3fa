"""The Default configuration, estimated from what a job measured: one estimate per job, which
every figure compares with (energy, time and cost saved, the published records)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple, TypedDict

from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.units import J_PER_KWH
from zeus_airflow.core.domain import SAVED_VS_DEFAULT, TrainingFigures, energy_with_setup_j
from zeus_airflow.core.domain.physics import contradiction
from zeus_airflow.core.reports.records import DefaultEstimate, Version
from zeus_airflow.core.store.reads import Alike, Reader


class DefaultOf(NamedTuple):
    """What a version's Default estimate needs of its configuration."""

    batch_size: int
    """b0, the default batch size."""
    eta: float
    """The cost's weight of energy (``JobConfig.eta``): Default's cost is its energy and time
    priced by the job's own formula."""


def default_estimate(reader: Reader, v: Version) -> DefaultEstimate | None:
    """Mean energy and time of b0's runs that ran to their end (the target, or max_epochs on
    a hard day, when Default would have missed it too), each scaled from the limit it trained
    at to b0's maximum profiled limit by the profile's energy and time per step (as measured
    where the profile contradicts physics: ``domain.physics``). None until such a run
    exists. The cost is the job's cost formula on that energy and time: one Default for every
    figure (issue 47)."""
    return default_estimates(reader, [v])[v.pk]


def default_estimates(
    reader: Reader, chosen: Sequence[Version]
) -> dict[int, DefaultEstimate | None]:
    """:func:`default_estimate` of each version, by its key, in two reads for them all."""
    return estimates_of(reader, {v.pk: DefaultOf(v.default_batch_size, v.eta) for v in chosen})


def estimates_of(
    reader: Reader, jobs: Mapping[int, DefaultOf]
) -> dict[int, DefaultEstimate | None]:
    """:func:`default_estimate` of each version key in ``jobs``: for a caller that holds a
    job's key rather than its :class:`Version` (a published record)."""
    if not jobs:
        return {}
    alike: dict[int, list[Alike]] = {}
    for row in reader.alike_runs(list(jobs)):
        alike.setdefault(row.job_pk, []).append(row)
    b0 = {pk: job.batch_size for pk, job in jobs.items()}
    profiles: dict[int, dict[tuple[str, int], Profile]] = {}
    for pk, _, model, count, limit, power, speed in reader.profile_points_of(b0):
        setup = profiles.setdefault(pk, {}).setdefault((model, count), {})
        setup[limit] = LimitMeasurement(limit, power, speed)
    found = {}
    for pk, job in jobs.items():
        rows = alike.get(pk, [])
        default = [row for row in rows if row.batch_size == job.batch_size]
        estimate = _estimate(job, default, profiles.get(pk, {}))
        found[pk] = estimate and replace(estimate, **run_spread(rows))
    return found


Profile = dict[int, LimitMeasurement]
"""A power profile's points by limit (W)."""


def _estimate(
    job: DefaultOf, successes: list[Alike], profiles: dict[tuple[str, int], Profile]
) -> DefaultEstimate | None:
    """From b0's runs that ran to their end, added up per GPU setup and limit (``runs``
    each). Energy scales by the profile's energy per step, time by its time per step; the
    cost's energy part (``eta`` times the energy) is priced on Default's energy, the rest of
    it (time at MAXPOWER, and the host's energy where the job counts it) scales with time."""
    if not successes:
        return None
    energy, time, rest_of_cost, scaled, top = 0.0, 0.0, 0.0, 0, None
    untrusted: list[str] = []
    for s in successes:
        measured = profiles.get((s.gpu_model, s.gpu_count), {})
        top = max(measured, default=top)
        energy_ratio, time_ratio = 1.0, 1.0
        at, at_max = measured.get(s.power_limit_w), measured.get(max(measured, default=-1))
        found = contradiction(measured)
        if found is not None:
            untrusted.append(f"on {s.gpu_model} x{s.gpu_count}, {found.describe()}")
        elif at is not None and at_max is not None:
            energy_ratio = at_max.energy_per_step_j / at.energy_per_step_j
            time_ratio = at_max.time_per_step_s / at.time_per_step_s
            scaled += s.runs
        energy += s.energy_j * energy_ratio
        time += s.time_s * time_ratio
        rest_of_cost += (s.cost - job.eta * s.energy_j) * time_ratio
    n = sum(s.runs for s in successes)
    return DefaultEstimate(
        job.batch_size,
        top,
        energy / n,
        time / n,
        n,
        scaled,
        (job.eta * energy + rest_of_cost) / n,
        untrusted_profile="; ".join(sorted(set(untrusted))) or None,
    )


def run_spread(rows: Sequence[Alike]) -> Spread:
    """A version's runs' own spread: the coefficient of variation of energy, time and cost
    among runs alike (:class:`Alike` with two runs or more), pooled over its sets of such
    runs (None each without any)."""
    return Spread(
        energy_cv=_pooled_cv(rows, "energy_j", "energy_j_sq"),
        time_cv=_pooled_cv(rows, "time_s", "time_s_sq"),
        cost_cv=_pooled_cv(rows, "cost", "cost_sq"),
    )


def _pooled_cv(rows: Sequence[Alike], total: str, squares: str) -> float | None:
    """The coefficient of variation of a figure (its sum and sum of squares per set of runs
    alike), pooled over the sets: each set's squared deviations from its own mean, relative
    to that mean, over the degrees of freedom of them all."""
    deviations, freedom = 0.0, 0
    for row in rows:
        mean = getattr(row, total) / row.runs
        if row.runs > 1 and mean > 0:
            deviations += max(getattr(row, squares) - row.runs * mean * mean, 0.0) / mean**2
            freedom += row.runs - 1
    return math.sqrt(deviations / freedom) if freedom else None


class Spread(TypedDict):
    """:class:`DefaultEstimate`'s spreads, by name."""

    energy_cv: float | None
    time_cv: float | None
    cost_cv: float | None


def default_emissions_g(
    default: DefaultEstimate | None, runs: Sequence[TrainingFigures]
) -> list[float | None]:
    """What each run would have emitted the Default way: b0 at the maximum limit (the
    estimate's energy, plus the run's own setup energy, which Default would spend too),
    started on schedule: at the intensity forecast for the run's slot had it not waited
    (the intensity it ran at when it did not wait). None where the run has no carbon
    figures, or before there is an estimate."""
    if default is None:
        return [None] * len(runs)
    shown: list[float | None] = []
    for r in runs:
        intensity = r.on_schedule_intensity_g_per_kwh
        if intensity is None:
            shown.append(None)
            continue
        shown.append(energy_with_setup_j(r, default.energy_j) / J_PER_KWH * intensity)
    return shown


def savings(default: DefaultEstimate | None, run: TrainingFigures) -> dict[str, float | None]:
    """What one run saved against Default's estimate per run (``SAVED_VS_DEFAULT``, by name):
    Default's energy (J), time (s), cost and gCO2e (:func:`default_emissions_g`) minus the
    run's; each None where either side is unknown (no estimate yet, no carbon figures)."""
    if default is None:
        return dict.fromkeys((f.name for f in SAVED_VS_DEFAULT), None)
    pairs = {
        "saved_energy_j": (default.energy_j, run.energy_j),
        "saved_time_s": (default.time_s, run.time_s),
        "saved_cost": (default.cost, run.cost),
        "saved_emissions_g": (default_emissions_g(default, [run])[0], run.emissions_g),
    }
    saved: dict[str, float | None] = {}
    for f in SAVED_VS_DEFAULT:
        of_default, own = pairs[f.name]
        saved[f.name] = None if of_default is None or own is None else of_default - own
    return saved
