"""The Default configuration's cost, estimated from what a job measured."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, select

from zeus_airflow.core.cost import LimitMeasurement
from zeus_airflow.core.reports.arms import profile_points
from zeus_airflow.core.reports.records import DefaultEstimate, RunRecord, Version
from zeus_airflow.core.store.snapshot import DEFAULT_COST
from zeus_airflow.core.store.tables import trials
from zeus_airflow.core.units import J_PER_KWH


def default_estimate(conn: Connection, v: Version) -> DefaultEstimate | None:
    """Mean energy and time of b0's successful runs, each scaled from the limit it trained at
    to b0's maximum profiled limit by the profile's energy and time per step. None until b0
    has succeeded once. Failed b0 runs are left out, which can only make Default look cheaper,
    so the savings shown are conservative. The cost is the mean of what those runs reckoned
    Default would have paid for their steps (the exploration budget's figure)."""
    b0 = v.config.default_batch_size
    successes = conn.execute(
        select(trials.c.energy_j, trials.c.time_s, trials.c.power_limit_w, trials.c.gpu_model,
               trials.c.gpu_count, DEFAULT_COST.label("default_cost"))
        .where(trials.c.job_pk == v.pk, trials.c.batch_size == b0,
               trials.c.status == "succeeded")).all()
    if not successes:
        return None
    profiles: dict[tuple[str, int], dict[int, LimitMeasurement]] = {}
    for p in profile_points(conn, v.pk, b0):
        profiles.setdefault((p.gpu_model, p.gpu_count), {})[p.power_limit_w] = \
            LimitMeasurement(p.power_limit_w, p.avg_power_w, p.steps_per_s)
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
        scaled += 1
    n = len(successes)
    costs = [s.default_cost for s in successes if s.default_cost is not None]
    return DefaultEstimate(b0, top, energy / n, time / n, n, scaled,
                           sum(costs) / len(costs) if costs else None)


def default_emissions_g(default: DefaultEstimate | None,
                        runs: Sequence[RunRecord]) -> list[float | None]:
    """What each run would have emitted the Default way: b0 at the maximum limit (the
    estimate's energy, plus the run's own setup energy, which Default would spend too),
    started on schedule: at the intensity forecast for the run's slot had it not waited
    (the intensity it ran at when it did not wait). None where the run has no carbon
    figures, or before there is an estimate."""
    if default is None:
        return [None] * len(runs)
    shown: list[float | None] = []
    for r in runs:
        intensity = r.unshifted_intensity_g_per_kwh if r.start_delay_s else None
        intensity = intensity if intensity is not None else r.carbon_intensity_g_per_kwh
        if r.emissions_g is None or intensity is None:
            shown.append(None)
            continue
        shown.append((default.energy_j + (r.setup_energy_j or 0.0)) / J_PER_KWH * intensity)
    return shown
