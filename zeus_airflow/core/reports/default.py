"""The Default configuration's cost, estimated from what a job measured."""

from __future__ import annotations

from collections.abc import Sequence

from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.units import J_PER_KWH
from zeus_airflow.core.domain import SAVED_VS_DEFAULT, TrainingFigures, energy_with_setup_j
from zeus_airflow.core.reports.records import DefaultEstimate, Version
from zeus_airflow.core.store.reads import DefaultRuns, Reader


def default_estimate(reader: Reader, v: Version) -> DefaultEstimate | None:
    """Mean energy and time of b0's runs that ran to their end (the target, or max_epochs on
    a hard day, when Default would have missed it too), each scaled from the limit it trained
    at to b0's maximum profiled limit by the profile's energy and time per step. None until
    such a run exists. The cost is the mean of what those runs reckoned Default would have
    paid (the exploration budget's figure, over the same runs as the budget's books)."""
    return default_estimates(reader, [v])[v.pk]


def default_estimates(
    reader: Reader, chosen: Sequence[Version]
) -> dict[int, DefaultEstimate | None]:
    """:func:`default_estimate` of each version, by its key, in two reads for them all."""
    return estimates_of(reader, {v.pk: v.default_batch_size for v in chosen})


def estimates_of(reader: Reader, b0: dict[int, int]) -> dict[int, DefaultEstimate | None]:
    """:func:`default_estimate` of each version key in ``b0`` (with its default batch size):
    for a caller that holds a job's key rather than its :class:`Version`."""
    if not b0:
        return {}
    return _with_profiles(reader, b0, reader.default_runs(b0))


def _with_profiles(
    reader: Reader, b0: dict[int, int], successes: dict[int, list[DefaultRuns]]
) -> dict[int, DefaultEstimate | None]:
    """The estimates, with the profile points they scale by: for each GPU setup, its
    highest limit and the limits b0 trained at (the others are read, not built)."""
    trained = {
        (pk, s.gpu_model, s.gpu_count, s.power_limit_w)
        for pk, rows in successes.items()
        for s in rows
    }
    points = reader.profile_points_of(b0)
    top: dict[tuple[int, str, int], int] = {}
    for pk, _, model, count, limit, _, _ in points:
        top[pk, model, count] = max(top.get((pk, model, count), limit), limit)
    profiles: dict[int, dict[tuple[str, int], dict[int, LimitMeasurement]]] = {}
    for pk, _, model, count, limit, power, speed in points:
        if limit == top[pk, model, count] or (pk, model, count, limit) in trained:
            profiles.setdefault(pk, {}).setdefault((model, count), {})[limit] = LimitMeasurement(
                limit, power, speed
            )
    return {
        pk: _estimate(size, successes.get(pk, []), profiles.get(pk, {})) for pk, size in b0.items()
    }


def _estimate(
    b0: int,
    successes: list[DefaultRuns],
    profiles: dict[tuple[str, int], dict[int, LimitMeasurement]],
) -> DefaultEstimate | None:
    """From b0's runs that ran to their end, added up per GPU setup and limit (``runs``
    each)."""
    if not successes:
        return None
    energy, time, scaled, top = 0.0, 0.0, 0, None
    for s in successes:
        measured = profiles.get((s.gpu_model, s.gpu_count), {})
        top = max(measured, default=top)
        at, at_max = measured.get(s.power_limit_w), measured.get(max(measured, default=-1))
        if at is None or at_max is None:
            energy, time = energy + s.energy_j, time + s.time_s
            continue
        energy += s.energy_j * at_max.energy_per_step_j / at.energy_per_step_j
        time += s.time_s * at_max.time_per_step_s / at.time_per_step_s
        scaled += s.runs
    n = sum(s.runs for s in successes)
    costed = sum(s.costed for s in successes)
    cost = sum(s.default_cost or 0.0 for s in successes if s.costed) / costed if costed else None
    return DefaultEstimate(b0, top, energy / n, time / n, n, scaled, cost)


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
