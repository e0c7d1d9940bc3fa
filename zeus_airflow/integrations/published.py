"""A run's figures for the places teams already look: OpenLineage, Airflow Asset events and
MLflow (docs/integrations.md).

One record per run, built from the one declaration (``core/domain/figures.py``): the job's id,
every figure the run pushes as an XCom (its training figures, its ``RUN_FACTS`` and, with a
``carbon_zone``, its carbon figures) and what it saved against Default
(``SAVED_VS_DEFAULT``). :data:`PUBLISHED` lists them in that order; each consumer takes the
record as it is (an OpenLineage facet, an Asset event's ``extra``) or by type (MLflow's
metrics and params). Energy in J, time in s, power in W, emissions in gCO2e; None: not
measured (or not known yet, e.g. the savings before the job has a Default estimate).
Replayed and simulated figures say so in ``measurement``.

Airflow-free: the operator's side is ``integrations/publishing.py``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from zeus_airflow.core.domain import FIGURES, RUN_FACTS, SAVED_VS_DEFAULT, Figure, TrainingFigures
from zeus_airflow.core.domain.finite import finite_or_none

if TYPE_CHECKING:
    from zeus_airflow.core.domain import RecurrenceKey, RunCarbon
    from zeus_airflow.core.reports import RunRecord
    from zeus_airflow.core.store.base import Store
    from zeus_airflow.core.train.engine import RecurrenceResult

JOB_ID = Figure("job_id", "", sql="text", doc="the Zeus job (its page, `zeus-airflow runs --job`)")
PUBLISHED: tuple[Figure, ...] = (
    JOB_ID,
    *(f for f in FIGURES.values() if f.xcom),
    *RUN_FACTS,
    *SAVED_VS_DEFAULT,
)
"""What a run publishes, in order: its job, its XCom figures, its facts, its savings."""

_JSON_TYPES = {
    "float": "number",
    "int": "integer",
    "bool": "boolean",
    "code": "string",
    "zone": "string",
    "text": "string",
}


def record(
    result: RecurrenceResult,
    footprint: RunCarbon | None,
    control: str | None,
    store: Store | None,
    log: logging.Logger | None = None,
) -> dict[str, Any]:
    """A finished run's :data:`PUBLISHED` values, by name. ``store``: where Default's
    estimate is read (None, or a store that fails: the savings are None, said in ``log``)."""
    from zeus_airflow.operators.summary import carbon_xcom_values, xcom_values

    values: dict[str, Any] = {"job_id": result.job.job_id, **xcom_values(result, control)}
    figures = result.figures
    if footprint is not None:
        values.update(carbon_xcom_values(footprint))
        figures = replace(figures, **footprint.figures())
    config = result.job.config
    default = (config.default_batch_size, config.eta)
    values.update(_savings(store, result.job.id, default, figures, log))
    return _published(values)


def stored_record(store: Store, job_id: str, key: RecurrenceKey) -> dict[str, Any] | None:
    """The :data:`PUBLISHED` values of the run ``key`` as the store holds them (its
    tries' figures by the declaration's rule, its carbon figures): what a run that failed
    before it could publish anything measured. None when the store has no such run."""
    from zeus_airflow.core.reports import run_of_task

    with store.reader() as reader:
        found = run_of_task(reader, job_id, key)
    if found is None:
        return None
    run, version = found
    values = {"job_id": job_id, "tries": len(run.batch_sizes), **_fields(run)}
    default = (version.default_batch_size, version.eta)
    values.update(_savings(store, version.pk, default, run, None))
    return _published(values)


def _published(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` in :data:`PUBLISHED`'s order, each finite or None as the XComs are
    (``core/domain/finite.py``): OpenLineage's client writes a NaN as a bare ``NaN``, which
    is not JSON (a lineage backend refuses the event), so a measurement gone wrong reads as
    not measured here too."""
    return {f.name: finite_or_none(values.get(f.name)) for f in PUBLISHED}


def _fields(run: RunRecord) -> dict[str, Any]:
    return {f.name: getattr(run, f.name) for f in PUBLISHED if hasattr(run, f.name)}


def _savings(
    store: Store | None,
    job_pk: int,
    default: tuple[int, float],
    figures: TrainingFigures,
    log: logging.Logger | None,
) -> dict[str, float | None]:
    """The run's savings against the job's Default estimate (``default``: b0 and eta; the
    estimate every report compares with, ``reports.default``); None each when the store
    cannot say (``log`` set: said there, and the rest of the record stands)."""
    from zeus_airflow.core.reports.default import DefaultOf, estimates_of, savings

    if store is None:
        return savings(None, figures)
    try:
        with store.reader() as reader:
            estimate = estimates_of(reader, {job_pk: DefaultOf(*default)})[job_pk]
            return savings(estimate, figures)
    except Exception as err:
        if log is None:
            raise
        warn(log, "Default's estimate cannot be read: the savings are left out", err)
        return savings(None, figures)


def describe(figure: Figure) -> str:
    """A published figure's meaning, its unit first: its attribute docstring, else what the
    declaration says of it."""
    text = (
        figure.doc
        or _docstrings().get(figure.name)
        or figure.comment
        or (figure.metric or "").removesuffix(f" ({figure.unit})")
    )
    text = " ".join(text.split())
    return f"{figure.unit}: {text}" if figure.unit and not text.startswith(figure.unit) else text


@functools.cache
def _docstrings() -> Mapping[str, str]:
    from zeus_airflow.core.reports.records import attribute_docstrings

    return attribute_docstrings(TrainingFigures)


def properties() -> dict[str, dict[str, Any]]:
    """The JSON schema of each published value (nullable: None is "not measured")."""
    return {
        f.name: {"type": [_JSON_TYPES[f.sql], "null"], "description": describe(f)}
        for f in PUBLISHED
    }


NUMBER_TYPES = ("float", "int", "bool")
"""The ``sql`` types of the figures that are numbers (a flag as 1 or 0)."""


def numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The record's known numbers (a flag as 1.0 or 0.0): what MLflow takes as metrics."""
    by_name = {f.name: f for f in PUBLISHED}
    return {
        name: float(value)
        for name, value in values.items()
        if value is not None and by_name[name].sql in NUMBER_TYPES
    }


def texts(values: Mapping[str, Any]) -> dict[str, str]:
    """The record's known texts (zone, provenance, phase, ...)."""
    by_name = {f.name: f for f in PUBLISHED}
    return {
        name: str(value)
        for name, value in values.items()
        if value is not None and by_name[name].sql not in NUMBER_TYPES
    }


def warn(log: logging.Logger, what: str, err: Exception) -> None:
    """A publication that failed: said in the task log, never raised (the model is trained)."""
    log.warning("Zeus: %s (%s: %s); the task goes on", what, type(err).__name__, err)


def cost_line(values: Mapping[str, Any]) -> str:
    """What a run's model cost, for a person: e.g. ``80.5 kJ · 9.72 min · b=1024 at 175 W ·
    6.71 gCO2e (fixed, DE) · saved 21.0 kJ against Default (replayed)``; figures in the UI's
    units, a replayed or simulated run labelled as such."""
    from zeus_airflow.core.common.units import show_emissions, show_energy, show_time

    parts = [
        show_energy(values.get("energy_j")),
        show_time(values.get("time_s")),
        f"b={values.get('batch_size')} at {values.get('power_limit_w')} W",
    ]
    if values.get("emissions_g") is not None:
        parts.append(
            f"{show_emissions(values['emissions_g'])} "
            f"({values.get('carbon_provenance')}, {values.get('carbon_zone')})"
        )
    saved = values.get("saved_energy_j")
    if saved is not None:
        parts.append(
            f"saved {show_energy(saved)} against Default"
            if saved >= 0
            else f"{show_energy(-saved)} more than Default"
        )
    line = " · ".join(parts)
    measurement = values.get("measurement")
    return line if measurement == "measured" else f"{line} ({measurement})"
