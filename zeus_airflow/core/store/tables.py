"""The store's tables: the single definition the SQL store and the migrations use.

The migrations in ``zeus_airflow/migrations`` are frozen snapshots of this file's history; a
test checks that upgrading to ``SCHEMA_VERSION`` yields exactly these tables.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from zeus_airflow.core.common.config import HOST_MAX_LENGTH, JOB_ID_MAX_LENGTH
from zeus_airflow.core.domain.figures import FIGURES, RUN_FIGURES, TRY_FIGURES, SQLType
from zeus_airflow.core.domain.trials import LIVE_STATUSES

SCHEMA_VERSION = "0013"
"""Alembic revision the code expects; bump it with every migration."""

metadata = MetaData()


def _owned_by_a_job_version() -> tuple[Column[int], Column[int]]:
    """The key columns of a job version's rows: their own id, and the version they belong to
    (deleted with it). New columns each call: a column belongs to one table."""
    return (
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_pk", Integer, ForeignKey("zeus_jobs.id", ondelete="CASCADE"), nullable=False),
    )


_SQL_TYPES: dict[SQLType, Any] = {
    "float": Float,
    "int": Integer,
    "bool": Boolean,
    "code": String(16),
    "zone": String(64),
    "text": Text,
}


def _figure_columns(names: tuple[str, ...]) -> list[Column[Any]]:
    """Figures as the declaration (``core/domain/figures.py``) stores them: one column each,
    nullable (a try's is None until it ends) but a run's grid zone, which its carbon row
    always has."""
    return [
        Column(
            name,
            _SQL_TYPES[FIGURES[name].sql],
            nullable=name != "carbon_zone",
            comment=FIGURES[name].comment,
        )
        for name in names
    ]


def _run_key() -> tuple[Column[str], Column[str], Column[str], Column[int], Column[int]]:
    """The Airflow keys of a run (a recurrence: a task instance's try), new columns each
    call."""
    return (
        Column("dag_id", String(250), nullable=False, default=""),
        Column("task_id", String(250), nullable=False, default=""),
        Column("run_id", String(250), nullable=False),
        Column("map_index", Integer, nullable=False, default=-1),
        Column("try_number", Integer, nullable=False, default=1),
    )


jobs = Table(
    "zeus_jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "job_id", String(JOB_ID_MAX_LENGTH), nullable=False, comment="dag_id.task_id by default"
    ),
    Column("version", Integer, nullable=False),
    Column("fingerprint", String(32), nullable=False),
    Column("config_json", Text, nullable=False),
    Column("seed", Integer, nullable=False),
    Column(
        "decisions",
        Integer,
        nullable=False,
        default=0,
        comment="decisions made; seeds each decision's random draws",
    ),
    Column("active", Boolean, nullable=False, default=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("job_id", "version", name="uq_zeus_jobs_version"),
)
# At most one active version per job: two workers registering a new configuration at once
# cannot both win.
Index(
    "uq_zeus_jobs_active",
    jobs.c.job_id,
    unique=True,
    sqlite_where=jobs.c.active,
    postgresql_where=jobs.c.active,
)

trials = Table(
    "zeus_trials",
    metadata,
    *_owned_by_a_job_version(),
    Column("decision_seq", Integer, nullable=False),
    *_run_key(),
    Column("attempt", Integer, nullable=False, comment="try of a batch size within the run"),
    Column("status", String(16), nullable=False),
    Column("phase", String(16), nullable=False),
    Column(
        "job_phase",
        String(16),
        comment="the job's phase after the try (pruning, sampling or infeasible)",
    ),
    Column("batch_size", Integer, nullable=False),
    *_figure_columns(TRY_FIGURES),
    Column(
        "observed",
        Boolean,
        nullable=False,
        default=False,
        comment="whether the cost feeds the arm's posterior",
    ),
    Column("measurement", String(16), nullable=False, comment="measured, replayed or simulated"),
    Column("gpu_model", String(120), nullable=False),
    Column("gpu_count", Integer, nullable=False),
    Column("error", Text),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column(
        "expires_at",
        DateTime(timezone=True),
        comment="a running trial not heard from by then expires",
    ),
    Column(
        "recorded_late_at",
        DateTime(timezone=True),
        comment="when a result the store could not take at the end of training reached "
        "it from the outbox; NULL: recorded on time",
    ),
    UniqueConstraint("job_pk", "decision_seq", name="uq_zeus_trials_decision"),
)
_LIVE = trials.c.status.in_(LIVE_STATUSES)
# One live trial per (task instance, try, attempt): a retry or re-run replaces, never adds.
Index(
    "uq_zeus_trials_live_key",
    trials.c.job_pk,
    trials.c.dag_id,
    trials.c.task_id,
    trials.c.run_id,
    trials.c.map_index,
    trials.c.try_number,
    trials.c.attempt,
    unique=True,
    sqlite_where=_LIVE,
    postgresql_where=_LIVE,
)
Index("ix_zeus_trials_arm", trials.c.job_pk, trials.c.observed, trials.c.batch_size, trials.c.id)
Index("ix_zeus_trials_phase", trials.c.job_pk, trials.c.phase, trials.c.decision_seq)
Index("ix_zeus_trials_status", trials.c.job_pk, trials.c.status)
Index("ix_zeus_trials_ti", trials.c.dag_id, trials.c.task_id, trials.c.run_id, trials.c.map_index)

RUN_KEY = ("job_pk", "dag_id", "task_id", "run_id", "map_index", "try_number")
"""What names a run (a recurrence: an Airflow task instance's try) in the tables."""

run_carbon = Table(
    "zeus_run_carbon",
    metadata,
    *_owned_by_a_job_version(),
    *_run_key(),
    *_figure_columns(RUN_FIGURES),
    UniqueConstraint(
        "job_pk",
        "dag_id",
        "task_id",
        "run_id",
        "map_index",
        "try_number",
        name="uq_zeus_run_carbon",
    ),
)
"""A run's carbon and price figures (one recurrence: an Airflow task instance's try), with
its carbon-aware start's plan; revision 0010 moved them here from its tries' rows."""

power_profiles = Table(
    "zeus_power_profiles",
    metadata,
    *_owned_by_a_job_version(),
    Column("batch_size", Integer, nullable=False),
    Column("gpu_model", String(120), nullable=False),
    Column("gpu_count", Integer, nullable=False),
    Column("power_limit_w", Integer, nullable=False),
    Column("avg_power_w", Float, nullable=False),
    Column("steps_per_s", Float, nullable=False),
    Column(
        "measured_steps",
        Integer,
        comment="slice in progress: steps measured so far; NULL: complete",
    ),
    Column(
        "measured_s",
        Float,
        comment="slice in progress: device seconds measured so far; NULL: complete",
    ),
    UniqueConstraint(
        "job_pk",
        "batch_size",
        "gpu_model",
        "gpu_count",
        "power_limit_w",
        name="uq_zeus_power_profiles",
    ),
)

gpu_leases = Table(
    "zeus_gpu_leases",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(HOST_MAX_LENGTH), nullable=False),
    Column("gpu_uuid", String(120), nullable=False),
    Column("gpu_index", Integer, nullable=False),
    Column(
        "original_limit_w",
        Integer,
        nullable=False,
        comment="the limit to put back if the task dies without restoring it",
    ),
    Column("pid", Integer, nullable=False),
    Column("trial_id", Integer),
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("host", "gpu_uuid", name="uq_zeus_gpu_leases_gpu"),
)
