"""The operator's side of the places a run's figures go besides its XComs (docs/integrations.md):

- OpenLineage: ``get_openlineage_facets_on_complete`` / ``_on_failure``, the methods Airflow's
  OpenLineage provider calls on every operator that has them (``integrations/openlineage.py``);
- Airflow Assets: each ``Asset`` among the task's ``outlets`` gets the run's record in its
  event's ``extra``, under :data:`EXTRA_KEY`, or under :data:`FALLBACK_KEY` where the train
  function put a value of its own there, which is kept (a downstream DAG scheduled on the
  Asset reads it from ``triggering_asset_events``: :func:`figures_of`);
- MLflow: the task's ``mlflow_experiment``, or the run the train function ran inside
  (``integrations/mlflow.py``).

``ZeusTrainOperator`` (and so ``@task.zeus``) inherits :class:`PublishesFigures`. The record
(``integrations/published.py``) is built once per run, and only when one of them takes it
(an Asset outlet, OpenLineage configured, an MLflow run): a task with none pays nothing. None
of it fails a task that trained (the first rule): a failure is a warning in the task log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from zeus_airflow.integrations.published import warn

if TYPE_CHECKING:
    from airflow.sdk import Context

    from zeus_airflow.core.domain import RunCarbon
    from zeus_airflow.core.store.base import Store
    from zeus_airflow.core.train.engine import RecurrenceResult
    from zeus_airflow.integrations.mlflow import Tracking

MLFLOW_KEY = "zeus_mlflow"
"""The XCom that says where the record went in MLflow, or that it is unpublished there
(``mlflow.Tracking.label``)."""
EXTRA_KEY = "zeus"
"""The key of an Asset event's ``extra`` that holds the run's record."""
FALLBACK_KEY = "zeus_airflow"
"""Where the record goes when the train function wrote :data:`EXTRA_KEY` itself: the user's
value is theirs, and Zeus never overwrites it (issue 48)."""


class PublishesFigures:
    """What ``ZeusTrainOperator`` adds for the integrations (see the module's doc)."""

    mlflow_experiment: str | None
    mlflow_budget_s: float
    log: Any
    _zeus_published: tuple[Any, dict[str, Any]] | None = None
    """The run's record once built, with the task instance's try it is of: what its
    OpenLineage events carry (never an earlier try's, should the operator be reused)."""
    _zeus_tracking: Tracking | None = None

    @contextmanager
    def _training_published(self, context: Context, store: Store, job_id: str) -> Iterator[None]:
        """Around training: the MLflow run of ``mlflow_experiment`` while it trains; when
        training raises, the figures the store holds for the run, for its FAIL event and
        MLflow."""
        from zeus_airflow.integrations import mlflow

        log = cast(logging.Logger, self.log)
        self._zeus_tracking = tracking = mlflow.start(
            self.mlflow_experiment, _run_name(context["ti"]), log, self.mlflow_budget_s
        )
        try:
            yield
        except BaseException:
            mlflow.end_training(tracking, failed=True, log=log)
            values = None
            if tracking.run_id is not None or _lineage_on():
                values = _stored(store, job_id, context["ti"], log)
            if values is not None:
                self._zeus_published = (_try_of(context["ti"]), values)
                mlflow.log_figures(tracking, values, log)
            _push_mlflow_label(context, tracking, log)
            raise
        mlflow.end_training(tracking, failed=False, log=log)

    def _publish_elsewhere(
        self,
        context: Context,
        store: Store,
        result: RecurrenceResult,
        footprint: RunCarbon | None,
        control: str | None,
    ) -> None:
        """The finished run's record to its Asset events, OpenLineage and MLflow."""
        from zeus_airflow.integrations import mlflow
        from zeus_airflow.integrations.published import record

        log = cast(logging.Logger, self.log)
        assets = _assets(getattr(self, "outlets", ()))  # BaseOperator's
        tracking = self._zeus_tracking or mlflow.Tracking()
        if not assets and tracking.run_id is None and not _lineage_on():
            _push_mlflow_label(context, tracking, log)
            return
        try:
            values = record(result, footprint, control, store, log)
        except Exception as err:  # the store's Default estimate unreadable, ...
            warn(log, "the run's figures could not be published beside its XComs", err)
            return
        self._zeus_published = (_try_of(context["ti"]), values)
        for asset in assets:
            try:
                _put_record(context["outlet_events"][asset].extra, values, asset, log)
            except Exception as err:
                warn(log, f"the event of outlet {asset!r} does not carry the figures", err)
        mlflow.log_figures(tracking, values, log)
        _push_mlflow_label(context, tracking, log)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Airflow's OpenLineage provider: the COMPLETE event's ``zeus`` run facet."""
        from zeus_airflow.integrations.openlineage import run_facets

        return run_facets(self._published_for(task_instance))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """Airflow's OpenLineage provider: the FAIL event's ``zeus`` run facet."""
        from zeus_airflow.integrations.openlineage import run_facets

        return run_facets(self._published_for(task_instance), failed=True)

    def _published_for(self, task_instance: Any) -> dict[str, Any] | None:
        """The record of ``task_instance``'s try; None when it published none."""
        if self._zeus_published is None:
            return None
        of, values = self._zeus_published
        return values if of == _try_of(task_instance) else None


def _put_record(
    extra: dict[str, Any], values: dict[str, Any], asset: Any, log: logging.Logger
) -> None:
    """The record into an outlet event's ``extra``: under :data:`EXTRA_KEY` unless the train
    function wrote its own value there, which is kept, and then under
    :data:`FALLBACK_KEY`, saying so; nowhere when both are the user's."""
    key = next((k for k in (EXTRA_KEY, FALLBACK_KEY) if k not in extra), None)
    if key == EXTRA_KEY:
        extra[key] = values
        return
    where = f'extra["{key}"]' if key else "no key of it (both are the train function's)"
    log.warning(
        'Zeus: the event of outlet %r already has extra["%s"], written by the train function: '
        "it is kept, and the run's figures are under %s",
        asset,
        EXTRA_KEY,
        where,
    )
    if key is not None:
        extra[key] = values


def figures_of(events: Mapping[Any, Sequence[Any]], asset: Any) -> list[dict[str, Any]]:
    """The records of the Zeus runs among ``asset``'s events in ``events`` (a DAG run's
    ``triggering_asset_events``, or ``inlet_events``), oldest first; events that do not
    carry one (another producer's) are left out. Where the train function kept
    :data:`EXTRA_KEY` for itself, the record is :data:`FALLBACK_KEY`'s."""
    found = []
    for event in events[asset]:
        extra = event.extra or {}
        key = FALLBACK_KEY if FALLBACK_KEY in extra else EXTRA_KEY
        if key in extra:
            found.append(extra[key])
    return found


def _push_mlflow_label(context: Context, tracking: Tracking, log: logging.Logger) -> None:
    """The XCom :data:`MLFLOW_KEY`, where MLflow was used: the run the record went to, or
    that it is unpublished and why."""
    label = tracking.label()
    if label is None:
        return
    try:
        context["ti"].xcom_push(key=MLFLOW_KEY, value=label)
    except Exception as err:  # an XCom backend's error: the log says it all the same
        warn(log, f"the XCom {MLFLOW_KEY!r} could not be pushed", err)


def _assets(outlets: Sequence[Any]) -> list[Any]:
    """The Assets among the outlets (an alias's events are the task's own to add)."""
    from airflow.sdk import Asset

    return [o for o in outlets if isinstance(o, Asset)]


def _lineage_on() -> bool:
    from zeus_airflow.integrations.openlineage import lineage_on

    return lineage_on()


def _stored(store: Store, job_id: str, ti: Any, log: logging.Logger) -> dict[str, Any] | None:
    from zeus_airflow.integrations.published import stored_record
    from zeus_airflow.operators.instances import recurrence_key

    try:
        return stored_record(store, job_id, recurrence_key(ti))
    except Exception as err:
        warn(log, "the failed run's figures could not be read back from the store", err)
        return None


def _try_of(ti: Any) -> tuple[str, str, str, int | None, int]:
    return (ti.dag_id, ti.task_id, ti.run_id, ti.map_index, ti.try_number)


def _run_name(ti: Any) -> str:
    """``<dag_id>.<task_id>.<run_id>``, with ``[<map_index>]`` for a mapped task instance."""
    from zeus_airflow.core.common.naming import default_job_id, map_label

    return f"{default_job_id(ti.dag_id, ti.task_id, map_label(ti.map_index))}.{ti.run_id}"
