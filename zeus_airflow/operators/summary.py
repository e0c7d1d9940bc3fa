"""What a finished recurrence publishes: its XComs and its one-line summary.

Both are pure functions of the engine's result, so the operator, the demo and the tests agree
on every key and every unit. Replayed and simulated figures say so: ``measurement`` in the
XComs, a ``(replayed)`` / ``(simulated)`` tag in the summary.
"""

from __future__ import annotations

import textwrap
from typing import Any

from zeus_airflow.core.common.units import (
    observe_note,
    show_budget_left,
    show_energy,
    show_time,
)
from zeus_airflow.core.devices.base import GPUGroup
from zeus_airflow.core.devices.base import power_control as core_power_control
from zeus_airflow.core.domain import CARBON_XCOM_KEYS, TRY_FIGURES, XCOM_KEYS, RunCarbon
from zeus_airflow.core.train.engine import RecurrenceResult
from zeus_airflow.core.train.profile_notice import so_far


def run_values(result: RecurrenceResult) -> dict[str, Any]:
    """A finished run's figures (``domain.run_of`` over its tries) and its ``RUN_FACTS``,
    by name: what its XComs and metrics take their values from."""
    figures = result.figures
    facts = {
        "batch_size": result.batch_size,
        "tries": len(result.tries),
        "phase": result.final.phase,
        "job_phase": result.job_phase,
        "measurement": result.measurement,
        "budget_left_runs": result.budget_left_runs,
    }
    return {**{name: getattr(figures, name) for name in TRY_FIGURES}, **facts}


def xcom_values(result: RecurrenceResult, power_control: str | None = None) -> dict[str, Any]:
    """Energy in J and time in s of training, summed over every try of the recurrence (the
    cost is theirs); setup before training apart; the host's CPU package and DRAM energy
    over the same training beside the GPUs' (None: not measured; not in the cost unless
    ``cost_includes_cpu``); batch size, power limit (W) and phase of the last try
    (``fallback``: no size was left in play, it trained as without Zeus). In observe mode,
    ``would_save_*`` say what training at ``optimal_power_limit_w`` would have saved (None in
    the other modes). ``default_cost``: the same steps priced at the maximum power limit;
    ``budget_left_runs``: the exploration budget left after the run, in Default runs' worth
    (phase ``exploit``: exploring would have spent more than was left). ``power_control``:
    how the limits could be changed (:func:`power_control`). Each key is declared in
    ``core/domain/figures.py``."""
    values = {**run_values(result), "power_control": power_control}
    return {key: values[key] for key in XCOM_KEYS}


def power_control(device: GPUGroup) -> str | None:
    """How the task could change its GPUs' power limits (``devices.base.power_control``)."""
    return core_power_control(device)


def carbon_xcom_values(footprint: RunCarbon) -> dict[str, Any]:
    """gCO2e, energy cost (the price's currency) and mean gCO2e/kWh of the run's energy
    (training and setup, every try), where the intensity came from, and the start plan's
    delay (s), expected gCO2e and reason (None without a carbon-aware start)."""
    figures = footprint.figures()
    return {key: figures[key] for key in CARBON_XCOM_KEYS}


def summary_line(
    result: RecurrenceResult, footprint: RunCarbon | None = None, power_control: str | None = None
) -> str:
    """E.g. ``812 kJ · 114 min · b=64 · 175 W``, then what else a reader must know; figures in
    the units the UI shows them in (``core/common/units.py``). Limits set through zeusd say so."""
    limit = f"{result.power_limit_w} W"
    parts = [
        show_energy(result.energy_j),
        show_time(result.time_s),
        f"b={result.batch_size}",
        f"{limit} via zeusd" if power_control == "zeusd" else limit,
    ]
    figures = result.figures
    host_j = figures.host_energy_j
    if host_j is not None:
        parts.insert(1, f"CPU+DRAM {show_energy(host_j)}")
    if footprint is not None:
        parts.append(footprint.describe())
    if len(result.tries) > 1:
        parts.append(f"{len(result.tries)} tries")
    if (figures.setup_time_s or 0.0) >= 0.05:
        parts.append(f"setup {show_time(figures.setup_time_s)} not in cost")
    if result.fell_back:
        parts.append("fallback: no batch size left to try")
    budget = show_budget(result)
    if budget:
        parts.append(budget)
    if not result.reached_target:
        parts.append("target not reached")
    if result.profile_unfinished:
        progress = result.profile_progress
        measured = "" if progress is None else f"{so_far(progress)}; "
        parts.append(
            f"power profile continues next run ({measured}trained at the limits being "
            f"profiled, {result.power_limit_w} W last)"
        )
    if result.unrecorded:
        parts.append(
            f"NOT in the store yet ({len(result.unrecorded)} tries): the store "
            "failed at the end of training; the next run records it late"
        )
    observed = observe_note(figures)
    if observed is not None:
        parts.append(observed)
    line = " · ".join(parts)
    return line if result.measurement == "measured" else f"{line} ({result.measurement})"


SUMMARY_WIDTH = 100
"""Characters per line of the ``zeus_summary`` field (Airflow's Rendered Templates tab shows
it as it is: one long line needed scrolling sideways)."""
SEPARATOR = " · "


def wrap_summary(line: str, width: int = SUMMARY_WIDTH) -> str:
    """The summary line in lines of at most ``width`` characters, broken after a `` ·``
    between its parts (inside a part only where the part alone is longer, at a space). Each
    break replaces one space: ``wrapped.replace("\n", " ")`` is the line again."""
    lines: list[str] = []
    for part in line.split(SEPARATOR):
        pieces = textwrap.wrap(part, width - 2, break_long_words=False, break_on_hyphens=False)
        for i, piece in enumerate(pieces or [part]):
            joint = SEPARATOR if i == 0 else " "
            if lines and len(lines[-1]) + len(joint) + len(piece) <= width - 2:
                lines[-1] += joint + piece
                continue
            if lines and i == 0:
                lines[-1] += " ·"  # the part goes on the next line: 2 characters kept for it
            lines.append(piece)
    return "\n".join(lines)


def show_budget(result: RecurrenceResult) -> str | None:
    """E.g. ``exploration budget 1.8 Default runs' worth left``, after the run (the figure
    of the XComs, the store and the UI), or ``exploration budget over by 0.18 Default runs'
    worth`` when the run took the job over it (its first run too: Default's cost is known
    from it); with why the best known size ran when it did; None without a budget."""
    left = result.budget_left_runs
    if left is None:
        return None
    budget = f"exploration budget {show_budget_left(left, BUDGET_UNIT)}"
    budget += " left" if left >= 0 else ""
    if result.exploited_for_budget:
        return f"exploited: exploring was not worth what the budget could pay ({budget})"
    return budget


BUDGET_UNIT = "Default runs' worth"
"""The budget's unit as the summary line says it."""
