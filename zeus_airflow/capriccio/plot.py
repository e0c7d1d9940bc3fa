"""The Capriccio run's figure, after the paper's Fig. 10: per slice, the batch size chosen and
the energy and time of its retraining, with the abrupt shift marked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from zeus_airflow import plotting
from zeus_airflow.capriccio.experiment import SliceOutcome

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_PHASE_COLORS = {"pruning": "C1", "sampling": "C0", "concurrent": "C2"}


def plot_capriccio(outcomes: Sequence[SliceOutcome], path: Path, title: str) -> None:
    """Three panels sharing the slice axis; shaded: slices mixing tweets from before and after
    the abrupt shift; red line: the first slice entirely after it."""
    plt = plotting.pyplot("plot_capriccio (capriccio --plot)")

    fig, (size_ax, energy_ax, time_ax) = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True)
    x = [o.index for o in outcomes]
    for o in outcomes:
        for attempt, (batch_size, phase, _) in enumerate(o.tries):
            final = attempt == len(o.tries) - 1 and o.reached_target
            size_ax.scatter(
                o.index,
                batch_size,
                marker="o" if final else "x",
                s=36 if final else 24,
                color=_PHASE_COLORS.get(phase, "gray"),
                zorder=3,
            )
        if not o.tries:
            size_ax.scatter(o.index, 1, marker="v", color="red", s=40, zorder=3)
    phases = {phase for o in outcomes for _, phase, _ in o.tries}
    for phase, color in _PHASE_COLORS.items():
        if phase in phases:
            size_ax.scatter([], [], color=color, label=phase)
    size_ax.scatter([], [], marker="x", color="gray", label="try stopped short of the target")
    if any(not o.tries for o in outcomes):
        size_ax.scatter([], [], marker="v", color="red", label="every batch size failed")
    size_ax.set_yscale("log", base=2)
    tried = [b for o in outcomes for b, _, _ in o.tries] or [1]
    size_ax.set_ylim(min(tried) / 2, max(tried) * 8)  # headroom for the legend
    size_ax.set_ylabel("batch size")
    size_ax.set_title(f"{title}: batch size per slice (simulated GPU, real CPU training)")
    size_ax.legend(fontsize=7, loc="upper left", ncol=3)
    energy_ax.bar(x, [o.energy_j for o in outcomes], color="C2")
    energy_ax.set_ylabel("energy (J, simulated)")
    energy_ax.set_title("energy of the slice's retraining, every try included (simulated)")
    time_ax.bar(x, [o.time_s for o in outcomes], color="C4")
    time_ax.set_ylabel("time (s, simulated)")
    time_ax.set_title("time of the slice's retraining, every try included (simulated)")
    time_ax.set_xlabel("slice (one per day)")
    _mark_shift(outcomes, (size_ax, energy_ax, time_ax))
    plotting.save(fig, path)


def _mark_shift(outcomes: Sequence[SliceOutcome], axes: Sequence[Axes]) -> None:
    mixed = [o.index for o in outcomes if o.post_shift_share and o.post_shift_share < 1]
    after = next((o.index for o in outcomes if o.post_shift_share == 1), None)
    for ax in axes:
        if mixed:
            ax.axvspan(
                min(mixed) - 0.5,
                max(mixed) + 0.5,
                color="orange",
                alpha=0.12,
                label="slices mixing pre- and post-shift tweets",
            )
        if after is not None:
            ax.axvline(
                after - 0.5, color="red", linewidth=0.9, label="first slice after the abrupt shift"
            )
    if mixed or after is not None:
        axes[-1].legend(fontsize=7, loc="upper right")
