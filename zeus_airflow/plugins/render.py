"""HTML for the Zeus pages: Jinja templates (``templates/``) with the stylesheet and the theme
script inlined, so a page is one self-contained response (no CDN, no extra round trip)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib.resources import files
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader
from markupsafe import Markup, escape
from starlette.requests import Request

from zeus_airflow.core.carbon.accounting import shift_savings
from zeus_airflow.core.common.units import (
    interval_tone,
    negligible_saving,
    saving_tone,
    show_budget_left,
    show_cost,
    show_emissions,
    show_energy,
    show_kwh,
    show_saved_interval,
    show_saved_share,
    show_saving,
    show_time,
    within_noise,
)
from zeus_airflow.core.domain import FIGURES as DECLARED
from zeus_airflow.core.domain import STATUS_SHOWN, Shown
from zeus_airflow.core.reports import SAVINGS, RunRecord, emitted
from zeus_airflow.plugins.urls import Urls

DEFAULT_METHOD = (
    "Default trains at the default batch size b0 at the maximum power limit every run. Its "
    "energy and time per run are the mean over this job's runs of b0 that ran to their end "
    "(reached the target, or trained max_epochs on a day Default would have missed it too), "
    "each scaled from the limit it trained at to the maximum limit by b0's power profile "
    "(energy and time per step at both limits), unless the profile contradicts physics (a "
    "lower limit measured faster than a higher one): then they are taken as measured. Its "
    "cost is the job's cost formula on that energy and time: one Default for every saving "
    "and every published record. Runs of b0 stopped early (at the early-stop "
    "bound or the exploration budget's cap) are left out: they stopped because they cost "
    "more, so leaving them out can only make Default look cheaper, and the savings are a "
    "conservative estimate. Each saving's ± is its 95 % interval from the runs' own spread "
    "(runs alike: one batch size, limit and GPU setup); within it, a saving is not "
    "distinguishable from 0."
)
MEASUREMENT_HELP = {
    "measured": "measured on real GPUs through NVML",
    "replayed": "replayed from the Zeus paper's measured traces on a virtual clock",
    "simulated": "real training steps, with GPU power from a model fitted to the paper's traces",
}


@dataclass(frozen=True)
class Assets:
    css: Markup
    theme_js: Markup


@functools.cache
def assets() -> Assets:
    static = files("zeus_airflow.plugins").joinpath("static")
    return Assets(
        Markup(static.joinpath("zeus.css").read_text()),
        Markup(static.joinpath("theme.js").read_text()),
    )


def _share(part: float | None, whole: float | None) -> str:
    """A saving ``part`` as a percentage of ``whole``: ``0 %`` below the resolution
    (``units.SAVING_RESOLUTION``)."""
    if part is None or not whole:
        return "—"
    return "0 %" if negligible_saving(part, whole) else show_saved_share(part / whole)


def _breakable(run_id: str) -> Markup:
    """A run id that may wrap after Airflow's ``scheduled__`` and before the time of its
    date (``<wbr>``), so that the runs table wraps it rather than scroll sideways."""
    text = str(escape(run_id))
    return Markup(text.replace("__", "__<wbr>").replace("T", "<wbr>T"))


def _when(moment: datetime | None) -> str:
    return "—" if moment is None else moment.strftime("%Y-%m-%d %H:%M UTC")


FIGURES = {"energy": show_energy, "cost": show_cost, "emissions": show_emissions}
"""The ``figure(kind)`` filter: a figure shown by its kind, for templates that loop over
kinds."""


def _figure(value: float | None, kind: str) -> str:
    return FIGURES[kind](value)


def _saving(saved: float | None, reference: float | None, kind: str = "energy") -> str:
    """The ``saving(reference, kind)`` filter: a saving shown by its kind (or ``kwh``), ``0``
    below the resolution of ``reference`` (``units.show_saving``)."""
    show = show_kwh if kind == "kwh" else FIGURES[kind]
    return show_saving(saved, reference, show)


def _within_noise(fraction: float | None, margin: float | None) -> bool:
    return fraction is not None and within_noise(fraction, margin)


def _emitted(runs: Sequence[RunRecord]) -> float:
    """gCO2e of the runs with carbon figures, together (``reports.emitted``)."""
    return sum(grams for _, grams, _ in emitted(None, runs))


@dataclass(frozen=True)
class FigureColumn:
    """One figure column of the job page's runs table."""

    name: str
    """The figure (a run's field)."""
    shown: Shown


def figure_columns(runs: Sequence[Any]) -> list[FigureColumn]:
    """The runs table's figure columns, as declared (``core/domain/figures.py``): each
    figure's ``page`` columns in order, one ``shown_with`` another figure only when one of
    ``runs`` has that figure (the carbon columns)."""
    return [
        FigureColumn(name, shown)
        for name, figure in DECLARED.items()
        for shown in figure.page
        if shown.shown_with is None or any(getattr(r, shown.shown_with) is not None for r in runs)
    ]


@functools.cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("zeus_airflow.plugins", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        energy=show_energy,
        kwh=show_kwh,
        duration=show_time,
        cost=show_cost,
        when=_when,
        breakable=_breakable,
        share=_share,
        emissions=show_emissions,
        emitted=_emitted,
        shift_saving=shift_savings,
        figure=_figure,
        saving=_saving,
        tone=saving_tone,
        saved_share=show_saved_share,
        budget_left=show_budget_left,
        saved_interval=show_saved_interval,
        interval_tone=interval_tone,
        within_noise=_within_noise,
    )
    env.globals.update(
        measurement_help=MEASUREMENT_HELP,
        default_method=DEFAULT_METHOD,
        run_status=STATUS_SHOWN,
        figure_columns=figure_columns,
        savings=SAVINGS,
    )
    return env


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = (
        environment()
        .get_template(template)
        .render(urls=Urls.of(request), assets=assets(), **context)
    )
    return HTMLResponse(html, status_code=status_code)
