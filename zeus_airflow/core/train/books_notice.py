"""The warning of a job whose exploration budget's books cannot be right (issue 48).

A store is shared by many writers (workers, the CLI, restores from backup), so a row no
worker wrote can reach a job's books: one of a cost no try of the job can reach, or a Default
cost a hundredfold from the others (``budget.books_problem``). The decision then reads the
budget as unknown and runs the default batch size (``exploring.within_budget``); this module
says so once per task run, by job, with the trials that weigh most in the books and the
commands that repair them. Nothing of it is a fault of the try: none is marked invalid.
"""

from __future__ import annotations

from zeus_airflow.core.decide.budget import books_problem
from zeus_airflow.core.domain import Decision, DeviceInfo, JobRef
from zeus_airflow.core.store.base import Store, StoreError

DROP_COMMAND = "zeus-airflow drop-trials"
"""The command that takes a trial out of every figure (``cli/store.py``)."""


def books_notice(store: Store, job: JobRef, device: DeviceInfo, decision: Decision) -> str | None:
    """The warning for ``decision``'s books, or None when they can be right (or the job has
    no budget)."""
    ledger = decision.budget.ledger if decision.budget is not None else decision.books
    if ledger is None:
        return None
    problem = books_problem(job.config, ledger)
    if problem is None:
        return None
    job_id = job.config.job_id
    try:
        suspects = store.books_suspects(job, device)
    except StoreError as err:  # the warning still names the job and the commands
        suspects, unread = [], f" (could not read them: {err})"
    else:
        unread = ""
    ids = ", ".join(str(i) for i in suspects) or "none found"
    trial_args = " ".join(f"--trial {i}" for i in suspects) or "--trial ID"
    return (
        f"job {job_id!r}: the exploration budget's books cannot be right: {problem}. The "
        f"trials that weigh most in them (on {device.count} x {device.model}): {ids}{unread}; "
        f"see them with `zeus-airflow runs --job {job_id} --wide`. Until they are repaired "
        "the budget reads as unknown, the default batch size runs, and no try is marked "
        "invalid for it. A row that is no real try (forged, a bad restore) is taken out of "
        f"every figure with `{DROP_COMMAND} --job {job_id} {trial_args}`; "
        f"`zeus-airflow reset --job {job_id}` starts the job over instead"
    )
