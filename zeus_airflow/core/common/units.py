"""Units for people: the unit that fits a set of values, and figures shown in it.

The store keeps SI units (J, s). Everything that shows a figure to a person (the operator's
summary line, the UI's pages and charts, the CLI) formats it here, so one run reads the same
everywhere. The rule: the largest unit in which the figure is at least 1 J for energy and at
least 2 of the unit for time (minutes from 2 min, hours from 2 h, so that 90 s is not "1.5
min" and 100 min is not "1.67 h"), three significant digits. kWh is shown next to J, since that
is what energy bills and carbon factors are quoted in. Nothing here imports Airflow: the core
and the UI both use it. It stands on the ground floor, below the domain, whose records say how
they read (``RunCarbon.describe``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the domain shows its records with these units: it may import this module
    from zeus_airflow.core.domain.figures import TrainingFigures

J_PER_KWH = 3.6e6

_ENERGY = (("GJ", 1e9), ("MJ", 1e6), ("kJ", 1e3), ("J", 1.0))
_TIME = (("h", 3600.0), ("min", 60.0), ("s", 1.0))
_EMISSIONS = (("tCO2e", 1e6), ("kgCO2e", 1e3), ("gCO2e", 1.0))


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, always in positional notation: ``.3g``
    turns to an exponent below 1e-4 and from 1,000, so one unit's figures read
    ``5.03e-05 kWh`` beside ``0.000113 kWh`` (issue 47); here ``0.0000503 kWh``. Trailing zeros
    are dropped, as ``g`` drops them."""
    shown = f"{value:.{digits}g}"
    if "e" not in shown or not math.isfinite(value):
        return shown
    rounded = float(f"{value:.{digits - 1}e}")  # the exponent after rounding (9.996 -> 10.0)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    fixed = f"{rounded:.{decimals}f}"
    return fixed.rstrip("0").rstrip(".") if "." in fixed else fixed


@dataclass(frozen=True)
class Unit:
    name: str
    scale: float
    """Size of the unit in SI units (J or s)."""

    def show(self, value: float | None) -> str:
        """Three significant digits in this unit; an em dash for no value."""
        return "—" if value is None else f"{significant(value / self.scale)} {self.name}"


def _fit(choices: tuple[tuple[str, float], ...], values: Sequence[float], at_least: float) -> Unit:
    """The largest unit in which the largest value is at least ``at_least``."""
    top = max(map(abs, values), default=0.0)
    for name, scale in choices:
        if top >= at_least * scale:
            return Unit(name, scale)
    return Unit(*choices[-1])


def energy_unit(values_j: Sequence[float]) -> Unit:
    return _fit(_ENERGY, values_j, 1.0)


def time_unit(values_s: Sequence[float]) -> Unit:
    """Minutes from two minutes up, hours from two hours up."""
    return _fit(_TIME, values_s, 2.0)


def kwh(energy_j: float | None) -> float | None:
    return None if energy_j is None else energy_j / J_PER_KWH


def show_energy(energy_j: float | None) -> str:
    """One figure in its own unit, e.g. ``812 kJ``."""
    return energy_unit([energy_j or 0.0]).show(energy_j)


def show_kwh(energy_j: float | None) -> str:
    value = kwh(energy_j)
    return "—" if value is None else f"{significant(value)} kWh"


def show_time(time_s: float | None) -> str:
    return time_unit([time_s or 0.0]).show(time_s)


def show_cost(cost: float | None) -> str:
    """A cost in the paper's J-equivalents, e.g. ``812 kJ-eq.``."""
    return "—" if cost is None else f"{show_energy(cost)}-eq."


def show_share(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal, e.g. ``24.6 %``."""
    return "—" if fraction is None else f"{100 * fraction:.1f} %"


SAVING_RESOLUTION = 0.0005
"""A saving smaller than this fraction of the figure it is measured against (0.05 %) reads as
``0``, without a sign or a colour. Savings are shown as percentages with one decimal, so
anything below half that last digit would read ``0.0 %`` or ``-0.0 %`` anyway: a sign or a
colour there claims a finding the figure cannot show. It also swallows float noise: a job that
only ever trained Default's configuration "saves" the rounding error of a sum (about 1e-14 J,
ten orders below its energy). The Default estimate itself is a mean of a few runs, uncertain
by far more than 0.05 %, so nothing a reader could act on is hidden."""

SavingTone = Literal["saved", "lost", "even"]
"""How a saving is coloured: the pages' CSS classes of the same names."""


def negligible_saving(saved: float, reference: float | None = 1.0) -> bool:
    """True when ``saved`` is below :data:`SAVING_RESOLUTION` of ``reference`` (whose unit it
    shares: J of J, a fraction of 1.0): shown as ``0``, neutral. Without a reference only an
    exact zero is."""
    return saved == 0 or abs(saved) < SAVING_RESOLUTION * abs(reference or 0.0)


def saving_tone(saved: float | None, reference: float | None = 1.0) -> SavingTone:
    """``saved`` (positive), ``lost`` (negative) or ``even`` (none, or below the resolution)."""
    if saved is None or negligible_saving(saved, reference):
        return "even"
    return "saved" if saved > 0 else "lost"


def show_saving(
    saved: float | None, reference: float | None, show: Callable[[float], str] = show_energy
) -> str:
    """A saving in its unit (``show``), ``0 J`` below the resolution: no sign, no noise."""
    if saved is None:
        return "—"
    return show(0.0) if negligible_saving(saved, reference) else show(saved)


def show_saved_share(fraction: float | None) -> str:
    """A fraction saved as a percentage with one decimal, ``0 %`` below the resolution."""
    if fraction is None:
        return "—"
    return "0 %" if negligible_saving(fraction) else show_share(fraction)


NOT_DISTINGUISHABLE = "not distinguishable from 0"
"""What a saving within its own noise is called, wherever it shows."""


def within_noise(fraction: float, margin: float | None) -> bool:
    """Whether a saved ``fraction``'s 95 % interval (``± margin``, from the runs' own spread:
    ``reports.records.saved_margin``) holds 0: then it is not distinguishable from 0. Without
    a margin, nothing says so."""
    return margin is not None and abs(fraction) <= margin


def show_saved_interval(
    fraction: float | None, margin: float | None, say_noise: bool = True
) -> str:
    """A fraction saved with its 95 % interval, e.g. ``39.2 % ± 6.1 %``; within noise,
    ``2.1 % ± 6.1 %, not distinguishable from 0`` (``say_noise``: else the caller marks it);
    the share alone without a margin; ``—`` without a fraction."""
    if fraction is None:
        return "—"
    if margin is None:
        return show_saved_share(fraction)
    shown = f"{show_saved_share(fraction)} ± {show_share(margin)}"
    return (
        f"{shown}, {NOT_DISTINGUISHABLE}" if say_noise and within_noise(fraction, margin) else shown
    )


def interval_tone(fraction: float | None, margin: float | None) -> SavingTone:
    """:func:`saving_tone` of a fraction saved, ``even`` within its own noise."""
    if fraction is not None and within_noise(fraction, margin):
        return "even"
    return saving_tone(fraction)


def show_budget_left(left_runs: float, unit: str = "") -> str:
    """The exploration budget left after a run, in Default runs' worth: ``1.8 runs``; an
    overrun says so in words, ``over by 0.18 runs`` (two significant digits: it never reads
    as 0, and never as a minus sign a reader might miss). Every surface shows it so: the
    summary line, ``zeus-airflow runs`` and ``report``, the job and fleet pages."""
    shown = f"{left_runs + 0.0:.1f}" if left_runs >= 0 else f"over by {-left_runs:.2g}"
    return f"{shown} {unit}".rstrip()


def observe_note(figures: TrainingFigures) -> str | None:
    """Observe mode's finding, e.g. ``observe: at 175 W it would have saved 97 kJ (12%),
    taking 3.2 min longer``; None outside observe mode (no estimate)."""
    saved_j, saved_s = figures.would_save_energy_j, figures.would_save_time_s
    if saved_j is None or saved_s is None:
        return None
    energy_j = figures.energy_j or 0.0
    share = f" ({saved_j / energy_j:.0%})" if energy_j > 0 else ""
    energy = {
        "saved": f"saved {show_energy(saved_j)}{share}",
        "lost": f"spent {show_energy(-saved_j)} more",
        "even": "saved nothing",
    }[saving_tone(saved_j, energy_j)]
    time = {
        "saved": f"finishing {show_time(saved_s)} sooner",
        "lost": f"taking {show_time(-saved_s)} longer",
        "even": "taking as long",
    }[saving_tone(saved_s, figures.time_s)]
    optimal_w = figures.optimal_power_limit_w
    at = f"at {optimal_w} W" if optimal_w is not None else "at the optimum"
    return f"observe: {at} it would have {energy}, {time}"


def emissions_unit(values_g: Sequence[float]) -> Unit:
    """Grams of CO2-equivalent, kilograms from 1 kg, tonnes from 1 t."""
    return _fit(_EMISSIONS, values_g, 1.0)


def show_emissions(grams: float | None) -> str:
    """gCO2e in its own unit, e.g. ``38.1 gCO2e``."""
    return emissions_unit([grams or 0.0]).show(grams)
