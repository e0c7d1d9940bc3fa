"""Which job a task instance feeds, at run time, and the one warning about mapped instances
that share one. The parse-time checks of mapped tasks are in ``operators/checks.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zeus_airflow.core.common.config import check_job_id
from zeus_airflow.core.common.naming import UNMAPPED, default_job_id, map_label
from zeus_airflow.core.domain import RecurrenceKey

if TYPE_CHECKING:
    from zeus_airflow.core.store.base import Store


def resolve_job_id(operator: Any, context: Any) -> str:
    """The job this task instance feeds: ``job_id`` when given (rendered by now), else
    the task's default, one job per mapped instance."""
    if operator.job_id is not None:
        return check_job_id(operator.job_id)
    map_index = context["ti"].map_index
    label = map_label(map_index, _rendered_map_index(operator, context, map_index))
    return default_job_id(operator.dag_id, operator.task_id, label)


def _rendered_map_index(operator: Any, context: Any, map_index: int | None) -> str | None:
    """The instance's ``map_index_template``, rendered as Airflow's task runner renders it
    (``_render_map_index``). Airflow's final rendering comes after execute, too late to
    name the job that training feeds, so it is rendered here from what the task knows
    before training (its rendered arguments, the run's context)."""
    template = context.get("map_index_template")
    if template is None or map_index is None or map_index == UNMAPPED:
        return None
    try:
        return operator.dag.get_template_env().from_string(template).render(context)
    except Exception as err:  # any error of the template: Airflow tolerates it here too
        operator.log.warning(
            "Zeus: map_index_template %r cannot be rendered before training (%s: %s), so "
            "this instance's job is named by its map index %d. A template that reads "
            "only the task's arguments (e.g. {{ task.train_kwargs['region'] }}) names "
            "the job as the UI names the instance.",
            template,
            type(err).__name__,
            err,
            map_index,
        )
        return None


def warn_if_instances_share_the_job(
    store: Store, ti: Any, job_id: str, shared_job: bool, log: Any
) -> None:
    """A mapped task whose instances feed one job (one job_id for all, or a
    map_index_template that renders alike) trains one bandit on every instance's data.
    Allowed, and meant with ``shared_job=True``; otherwise likely a mistake, said once
    in the job's life, by the second instance to have fed it, after its run (its trial
    is in the store then, whether the instances ran one after another or at once).
    Every instance saying so on every run would fill a wide map's logs."""
    if shared_job or ti.map_index is None or ti.map_index == UNMAPPED:
        return
    try:
        with store.reader() as reader:
            joined = reader.job_instances(job_id, ti.dag_id, ti.task_id)
            first_run = (
                joined[1:2] == [ti.map_index]
                and reader.job_instance_runs(job_id, ti.dag_id, ti.task_id, ti.map_index) == 1
            )
    except Exception as err:  # after training: a store fault must not fail the task
        log.warning(
            "Zeus: cannot check whether mapped instances share job %r: %s: %s",
            job_id,
            type(err).__name__,
            err,
        )
        return
    if first_run:
        log.warning(
            "Zeus: mapped instances %s and %d of task %s share one job, %r. For a job "
            "per instance leave job_id unset; if sharing is meant, set shared_job=True.",
            joined[0],
            ti.map_index,
            ti.task_id,
            job_id,
        )


def recurrence_key(ti: Any) -> RecurrenceKey:
    """The recurrence a task instance's try is: its run, task, map index and try number."""
    map_index = UNMAPPED if ti.map_index is None else ti.map_index
    return RecurrenceKey(ti.run_id, ti.dag_id, ti.task_id, map_index, ti.try_number)
