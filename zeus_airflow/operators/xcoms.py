"""What the operator keeps in XComs: the run's figures and summary (``operators/summary.py``
says which and how), and the outbox, the results the store could not take
(``core/domain/outbox.py``), pushed by every run of the task and recorded by its next run
(``core/train/recording.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zeus_airflow.core.common.full_disk import full_disk
from zeus_airflow.core.common.naming import UNMAPPED
from zeus_airflow.core.domain import (
    CARBON_XCOM_KEYS,
    XCOM_KEYS,
    PendingResult,
    RefusedResult,
    outbox_to_json,
    read_outbox,
)
from zeus_airflow.core.domain.finite import finite_or_none
from zeus_airflow.integrations.publishing import MLFLOW_KEY

if TYPE_CHECKING:
    from zeus_airflow.core.domain import RunCarbon
    from zeus_airflow.core.train.engine import RecurrenceResult

OUTBOX_KEY = "zeus_outbox"
"""The XCom every run pushes: the results the store could not take (core/domain/outbox.py),
its own and those it could not record either; the next run of the task records them."""
REFUSED_KEY = "zeus_outbox_refused"
"""The XCom a run pushes when it refused outbox entries as untrusted (not plausible, or not
the result of the trial they claim): each entry as found and why, for inspection. Never
recorded, never carried on."""
ZEUS_XCOM_KEYS = frozenset((*XCOM_KEYS, *CARBON_XCOM_KEYS, OUTBOX_KEY, REFUSED_KEY, MLFLOW_KEY))
"""Every key Zeus pushes: a train function's returned dict never takes one of them
(:func:`push_own_outputs`)."""


def earlier_outbox(ti: Any, log: Any) -> tuple[list[PendingResult], list[RefusedResult]]:
    """The latest earlier run's outbox (each run carries on what it could not record): the
    entries to record, and those refused as they are read (``outbox.read_outbox``).
    Unreadable: nothing, said, never a failed task."""
    try:
        value = ti.xcom_pull(
            task_ids=ti.task_id,
            key=OUTBOX_KEY,
            include_prior_dates=True,
            map_indexes=UNMAPPED if ti.map_index is None else ti.map_index,
        )
    except Exception as err:  # an XCom backend's error
        log.warning(
            "Zeus: the outbox of earlier runs (XCom %r) cannot be read, its "
            "results stay unrecorded: %s: %s",
            OUTBOX_KEY,
            type(err).__name__,
            err,
        )
        return [], []
    pending, refused = read_outbox(value)
    for entry in refused:
        log.warning(
            "Zeus: an entry of the outbox (XCom %r) is refused and NOT stored: %s; it is kept "
            "for inspection in this run's XCom %r",
            OUTBOX_KEY,
            entry.reason,
            REFUSED_KEY,
        )
    return pending, refused


def keep_outbox(
    ti: Any, pending: list[PendingResult], log: Any, refused: Sequence[RefusedResult] = ()
) -> None:
    """Pushes the results still to record (an empty outbox too: it replaces the last), and
    the entries refused, when there are any."""
    if pending:
        log.warning(
            "Zeus: %d result(s) not in the store yet are kept in the XCom %r; "
            "the next run of this task records them (trials %s)",
            len(pending),
            OUTBOX_KEY,
            [p.trial_id for p in pending],
        )
    try:
        ti.xcom_push(key=OUTBOX_KEY, value=outbox_to_json(pending))
    except Exception as err:  # the first rule: the model is trained; say what is lost
        full = full_disk(err)
        cause = f"{type(err).__name__}: {err}"
        log.error(
            "Zeus: the outbox cannot be kept (%s); results NOT in the store: %s",
            cause
            if full is None
            else f"a disk is full ({full}; {cause}): free some space "
            "on the disk of Airflow's metadata database or XCom backend",
            outbox_to_json(pending),
        )
    if refused:
        try:
            ti.xcom_push(key=REFUSED_KEY, value=[entry.to_json() for entry in refused])
        except Exception as err:  # only kept for inspection: said, never a failed task
            log.warning("Zeus: the refused outbox entries cannot be kept: %s", err)


def publish(
    ti: Any,
    result: RecurrenceResult,
    footprint: RunCarbon | None,
    control: str | None,
    log: Any,
) -> str:
    """Pushes the run's XComs, logs its summary line and sends its metrics; returns the
    summary wrapped for reading (``zeus_summary``: lines of at most 100 characters)."""
    from zeus_airflow.operators.metrics import emit_run_metrics
    from zeus_airflow.operators.summary import (
        carbon_xcom_values,
        summary_line,
        wrap_summary,
        xcom_values,
    )

    values = xcom_values(result, control)
    if footprint is not None:
        values.update(carbon_xcom_values(footprint))
    for key, value in values.items():
        if finite_or_none(value) is None and value is not None:
            log.warning("Zeus: the XCom %r is %r, not a finite number: pushed as None", key, value)
        ti.xcom_push(key=key, value=finite_or_none(value))
    summary = summary_line(result, footprint, control)
    log.info("Zeus: %s (job %s, %s phase)", summary, result.job.job_id, result.final.phase)
    emit_run_metrics(result, dag_id=ti.dag_id, task_id=ti.task_id, log=log)
    return wrap_summary(summary)


def xcom_check(value: Any) -> None:
    """Raises if Airflow's XCom backend cannot store the train function's return value, so
    that the try is judged before it is recorded as succeeded. XComs travel as strict JSON
    (the Execution API refuses NaN and infinities), so a value holding one is refused here,
    saying so, rather than after the try was counted."""
    import json

    from airflow.sdk.execution_time.xcom import XCom

    serialized = XCom.serialize_value(value)
    try:
        json.dumps(serialized, allow_nan=False)
    except ValueError:
        raise ValueError(
            "it holds a NaN or an infinity, which an XCom (strict JSON) cannot carry: "
            "return None or a finite number in its place (e.g. x if math.isfinite(x) else None)"
        ) from None
    except TypeError:  # a custom XCom backend's own value: its serialisation is its own
        pass


def push_own_outputs(ti: Any, value: Any, multiple_outputs: bool, log: Any) -> bool:
    """With ``multiple_outputs``, Airflow pushes each key of a returned dict as an XCom of
    that name, after Zeus's: one named like Zeus's (``energy_j``, ``zeus_outbox``...) would
    replace Zeus's figure or lose a pending result. Then this pushes the dict's other keys
    itself, warns naming the taken ones, and returns False: Airflow pushes the whole dict
    under ``return_value`` only. Returns ``multiple_outputs`` when nothing collides."""
    if not multiple_outputs or not isinstance(value, Mapping):
        return multiple_outputs
    taken = sorted(str(key) for key in value if key in ZEUS_XCOM_KEYS)
    if not taken:
        return multiple_outputs
    log.warning(
        "Zeus: the train function returned the key(s) %s, which are Zeus's own XComs: they "
        "are not pushed under those names (Zeus's stay); the whole dict is under "
        "return_value, its other keys under their own names. Rename them to keep them apart",
        taken,
    )
    for key, item in value.items():
        if isinstance(key, str) and key not in ZEUS_XCOM_KEYS:
            ti.xcom_push(key=key, value=item)
    return False
