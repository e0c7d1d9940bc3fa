"""The carbon experiment's figure: cumulative emissions per arm over the days, and the
trace's mean daily shape with when each arm started its runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zeus_airflow import plotting
from zeus_airflow.sim.carbon import ARM_NAMES, ARMS, CarbonExperimentResult


def plot_carbon(result: CarbonExperimentResult, path: Path) -> None:
    plt = plotting.pyplot("plot_carbon (bench/carbon_shift.py)")

    spec = result.spec
    fig, (cumulative_ax, shape_ax) = plt.subplots(1, 2, figsize=(13, 4.8))
    for index, arm in enumerate(ARMS):
        r = result.arms[arm]
        emitted = r.cumulative_g()
        cumulative_ax.plot(
            np.arange(1, len(emitted) + 1),
            emitted / 1000,
            color=f"C{index}",
            label=ARM_NAMES[arm],
            linestyle="--" if arm == "default" else "-",
        )
        start_hours = [(spec.schedule_hour + d / 3600) % 24 for d in r.delay_s]
        shape_ax.hist(
            start_hours,
            bins=np.arange(0, 25, 1),
            histtype="step",
            linewidth=1.6,
            color=f"C{index}",
            linestyle="--" if arm == "default" else "-",
            weights=np.full(len(start_hours), 1 / len(start_hours)),
        )
    cumulative_ax.set_xlabel("day")
    cumulative_ax.set_ylabel("cumulative emissions (kgCO2e, replayed)")
    cumulative_ax.set_title(
        f"{spec.gpu.upper()} {spec.workload}, deadline "
        f"{spec.deadline_h:g} h after {spec.schedule_hour:02d}:00 UTC"
    )
    cumulative_ax.legend(fontsize=8)
    cumulative_ax.grid(alpha=0.3)
    shape_ax.set_xlabel("hour of day (UTC)")
    shape_ax.set_ylabel("share of runs started in the hour")
    intensity_ax = shape_ax.twinx()
    intensity_ax.plot(np.arange(24) + 0.5, result.mean_shape_g, "k.-", label="mean intensity")
    intensity_ax.set_ylabel("mean intensity (gCO2e/kWh)")
    intensity_ax.legend(loc="upper left", fontsize=8)
    shape_ax.set_title(f"When runs started; intensity trace: {result.trace_label}", fontsize=9)
    fig.suptitle("Replayed: energy and time from the paper's traces, not measured", fontsize=10)
    plotting.save(fig, path, dpi=110)
