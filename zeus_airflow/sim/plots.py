"""Plots of simulation results: cumulative regret per policy and the batch size chosen."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zeus_airflow import plotting
from zeus_airflow.sim.simulator import SimulationResult


def plot_simulation(results: Sequence[SimulationResult], path: Path) -> None:
    """One row per (GPU, workload): mean cumulative regret per policy (left) and the batch size
    Zeus chose per recurrence for the first seed, with the oracle's as a line (right)."""
    plt = plotting.pyplot("plot_simulation (simulate --plot)")

    cells: dict[tuple[str, str], list[SimulationResult]] = defaultdict(list)
    for result in results:
        cells[(result.spec.gpu, result.spec.workload)].append(result)
    fig, axes = plt.subplots(len(cells), 2, figsize=(12, 2.8 * len(cells)), squeeze=False)
    for row, ((gpu, workload), cell) in enumerate(cells.items()):
        regret_ax, batch_ax = axes[row]
        by_policy: dict[str, list[SimulationResult]] = defaultdict(list)
        for result in cell:
            by_policy[result.spec.policy].append(result)
        for policy, runs in by_policy.items():
            curve = np.mean([np.cumsum(r.regret) for r in runs], axis=0) / 1e6
            regret_ax.plot(curve, label=policy)
        regret_ax.set_title(f"{gpu.upper()} {workload}: cumulative regret (replayed)")
        regret_ax.set_xlabel("recurrence")
        regret_ax.set_ylabel("regret (1e6 cost units)")
        regret_ax.legend(fontsize=8)
        chooser = by_policy.get("zeus") or next(iter(by_policy.values()))
        first = min(chooser, key=lambda r: r.spec.seed)
        batch_ax.plot(
            first.batch_size,
            ".",
            markersize=4,
            label=f"{first.spec.policy}, seed {first.spec.seed}",
        )
        batch_ax.axhline(first.oracle.batch_size, color="gray", linestyle="--", label="oracle")
        batch_ax.set_yscale("log", base=2)
        batch_ax.set_title(f"{gpu.upper()} {workload}: batch size chosen")
        batch_ax.set_xlabel("recurrence")
        batch_ax.legend(fontsize=8)
    plotting.save(fig, path)
