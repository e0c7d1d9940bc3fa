"""The drift experiment's figure (after the paper's Fig. 10): what each posterior window chose
per recurrence, what it cost, how many seeds found the new optimum, and the regret it took."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zeus_airflow import plotting
from zeus_airflow.sim.drift import ADAPT_HORIZON, ADAPT_SHARE, DriftResult


def plot_drift(results: Sequence[DriftResult], path: Path) -> None:
    """2x2 panels. The example seed is the first whose new optimum survived pruning (no policy
    can return to a pruned batch size); the share and the shaded regret use those seeds."""
    plt = plotting.pyplot("plot_drift (drift-experiment --plot)")

    by_window: dict[str, list[DriftResult]] = defaultdict(list)
    for result in results:
        by_window[result.spec.label].append(result)
    first = results[0]
    example_seed = next((r.spec.seed for r in results if r.can_adapt), first.spec.seed)
    fig, ((chosen_ax, cost_ax), (share_ax, regret_ax)) = plt.subplots(2, 2, figsize=(13, 8))
    for index, (label, runs) in enumerate(by_window.items()):
        example = next(r for r in runs if r.spec.seed == example_seed)
        _plot_example(chosen_ax, cost_ax, example, index, label)
        _plot_adaptation(share_ax, regret_ax, first, runs, index, label)
    _label_example(chosen_ax, cost_ax, first, example_seed)
    _label_adaptation(share_ax, regret_ax, first)
    for ax in (chosen_ax, cost_ax, share_ax, regret_ax):
        ax.axvline(first.spec.switch_at, color="red", linewidth=0.8)
        ax.set_xlabel("recurrence (red: data drift)")
        ax.legend(fontsize=7)
    plotting.save(fig, path)


def _plot_example(
    chosen_ax: Any, cost_ax: Any, example: DriftResult, index: int, label: str
) -> None:
    """One window's example seed: the batch size it chose and the cost, per recurrence."""
    color = f"C{index}"
    x = np.arange(len(example.batch_size))
    # A small vertical offset keeps the two windows' markers apart on the log axis.
    chosen_ax.plot(
        x,
        np.array(example.batch_size) * (1.04 if index else 0.96),
        ".",
        color=color,
        markersize=4,
        label=label,
    )
    cost_ax.plot(
        x,
        np.array(example.cost) / 1e6,
        ".-",
        color=color,
        linewidth=0.6,
        markersize=3,
        label=label,
    )


def _plot_adaptation(
    share_ax: Any,
    regret_ax: Any,
    first: DriftResult,
    runs: Sequence[DriftResult],
    index: int,
    label: str,
) -> None:
    """One window over its seeds: the share of recurrences at the new optimum (adaptable
    seeds), and the cumulative regret after the switch (their range shaded)."""
    spec, optima, color = first.spec, first.optima, f"C{index}"
    able = [r for r in runs if r.can_adapt] or runs
    hits = np.array([[b == optima.after.batch_size for b in r.batch_size] for r in able])
    share = np.convolve(hits.mean(axis=0), np.ones(ADAPT_HORIZON) / ADAPT_HORIZON, mode="valid")
    share_ax.plot(np.arange(len(share)), share, color=color, label=label)
    after = np.array([np.cumsum(r.regret[spec.switch_at :]) for r in able]) / 1e6
    every = np.array([np.cumsum(r.regret[spec.switch_at :]) for r in runs]) / 1e6
    steps = np.arange(spec.switch_at, spec.switch_at + after.shape[1])
    regret_ax.plot(
        steps,
        after.mean(axis=0),
        color=color,
        label=f"{label}: mean, range ({len(able)} adaptable seeds)",
    )
    regret_ax.fill_between(steps, after.min(axis=0), after.max(axis=0), color=color, alpha=0.15)
    regret_ax.plot(
        steps,
        every.mean(axis=0),
        color=color,
        linestyle="--",
        label=f"{label}: mean over all {len(runs)} seeds",
    )


def _label_example(chosen_ax: Any, cost_ax: Any, first: DriftResult, example_seed: int) -> None:
    """The optima before and after the drift, the example panels' scales and titles."""
    spec, optima = first.spec, first.optima
    where = f"{spec.gpu.upper()} {spec.workload}"
    chosen_ax.axhline(
        optima.before.batch_size,
        color="gray",
        linestyle=":",
        label=f"optimum before ({optima.before.batch_size})",
    )
    chosen_ax.axhline(
        optima.after.batch_size,
        color="black",
        linestyle="--",
        label=f"optimum after ({optima.after.batch_size})",
    )
    chosen_ax.set_yscale("log", base=2)
    chosen_ax.set_title(f"{where}: batch size chosen, seed {example_seed} (replayed)")
    chosen_ax.set_ylabel("batch size")
    cost_ax.step(
        [0, spec.switch_at, spec.recurrences],
        np.array([optima.before.cost, optima.after.cost, optima.after.cost]) / 1e6,
        where="post",
        color="black",
        linestyle="--",
        label="optimum's expected cost",
    )
    cost_ax.set_yscale("log")
    cost_ax.set_title(f"{where}: cost per recurrence, seed {example_seed} (replayed)")
    cost_ax.set_ylabel("cost (1e6 units)")


def _label_adaptation(share_ax: Any, regret_ax: Any, first: DriftResult) -> None:
    share_ax.axhline(ADAPT_SHARE, color="gray", linestyle=":")
    share_ax.set_ylim(-0.02, 1.02)
    share_ax.set_title(
        f"runs at {first.optima.after.batch_size} among the next {ADAPT_HORIZON}, "
        "mean over adaptable seeds (replayed)"
    )
    regret_ax.set_title("cumulative regret after the switch (replayed)")
    regret_ax.set_ylabel("regret (1e6 cost units)")
