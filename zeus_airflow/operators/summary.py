"""What a finished recurrence publishes: its XComs and its one-line summary.

Both are pure functions of the engine's result, so the operator, the demo and the tests agree
on every key and every unit. Replayed and simulated figures say so: ``measurement`` in the
XComs, a ``(replayed)`` / ``(simulated)`` tag in the summary.
"""

from __future__ import annotations

from typing import Any

from zeus_airflow.core.devices.base import Measurement
from zeus_airflow.core.engine import RecurrenceResult
from zeus_airflow.core.run import RunOutcome
from zeus_airflow.core.units import show_energy, show_time

XCOM_KEYS: tuple[str, ...] = ("batch_size", "power_limit_w", "energy_j", "time_s", "cost",
                              "epochs", "reached_target", "tries", "phase", "measurement",
                              "setup_energy_j", "setup_time_s")
"""Keys the operator pushes for every run, besides ``return_value``."""


def xcom_values(result: RecurrenceResult) -> dict[str, Any]:
    """Energy in J and time in s of training, summed over every try of the recurrence (the
    cost is theirs); setup before training apart; batch size, power limit (W) and phase of
    the last try (``fallback``: no size was left in play, it trained as without Zeus)."""
    return {
        "batch_size": result.batch_size,
        "power_limit_w": result.power_limit_w,
        "energy_j": result.energy_j,
        "time_s": result.time_s,
        "cost": result.cost,
        "epochs": result.epochs,
        "reached_target": result.reached_target,
        "tries": len(result.tries),
        "phase": result.final.phase,
        "measurement": result.measurement,
        "setup_energy_j": result.setup_energy_j,
        "setup_time_s": result.setup_time_s,
    }


def unrecorded_xcom_values(outcome: RunOutcome, measurement: Measurement) -> dict[str, Any]:
    """The figures of a try the store failed to record, so that they survive in Airflow."""
    return {
        "batch_size": outcome.batch_size,
        "power_limit_w": outcome.power_limit_w,
        "energy_j": outcome.energy_j,
        "time_s": outcome.time_s,
        "cost": outcome.cost,
        "epochs": outcome.epochs,
        "reached_target": outcome.reached_target,
        "measurement": measurement,
        "setup_energy_j": outcome.setup_energy_j,
        "setup_time_s": outcome.setup_time_s,
    }


def summary_line(result: RecurrenceResult) -> str:
    """E.g. ``812 kJ · 114 min · b=64 · 175 W``, then what else a reader must know; figures in
    the units the UI shows them in (``core/units.py``)."""
    parts = [show_energy(result.energy_j), show_time(result.time_s),
             f"b={result.batch_size}", f"{result.power_limit_w} W"]
    if len(result.tries) > 1:
        parts.append(f"{len(result.tries)} tries")
    if result.setup_time_s >= 0.05:
        parts.append(f"setup {show_time(result.setup_time_s)} not in cost")
    if result.fell_back:
        parts.append("fallback: no batch size left to try")
    if not result.reached_target:
        parts.append("target not reached")
    line = " · ".join(parts)
    return line if result.measurement == "measured" else f"{line} ({result.measurement})"

