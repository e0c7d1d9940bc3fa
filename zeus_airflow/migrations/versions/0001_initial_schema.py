"""Initial schema: jobs, trials, power profiles, GPU leases.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_LIVE = sa.text("status IN ('running', 'succeeded', 'failed', 'expired')")
_ACTIVE = sa.text("active")


def upgrade() -> None:
    op.create_table(
        "zeus_jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column(
            "job_id", sa.String(length=250), nullable=False, comment="dag_id.task_id by default"
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column(
            "decisions",
            sa.Integer(),
            nullable=False,
            comment="decisions made; seeds each decision's random draws",
        ),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "version", name="uq_zeus_jobs_version"),
    )
    op.create_index(
        "uq_zeus_jobs_active",
        "zeus_jobs",
        ["job_id"],
        unique=True,
        sqlite_where=_ACTIVE,
        postgresql_where=_ACTIVE,
    )
    op.create_table(
        "zeus_trials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("decision_seq", sa.Integer(), nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column(
            "attempt", sa.Integer(), nullable=False, comment="try of a batch size within the run"
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("power_limit_w", sa.Integer(), nullable=True),
        sa.Column("energy_j", sa.Float(), nullable=True),
        sa.Column("time_s", sa.Float(), nullable=True),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column("epochs", sa.Integer(), nullable=True),
        sa.Column("reached_target", sa.Boolean(), nullable=True),
        sa.Column("stop_reason", sa.String(length=16), nullable=True),
        sa.Column(
            "observed",
            sa.Boolean(),
            nullable=False,
            comment="whether the cost feeds the arm's posterior",
        ),
        sa.Column(
            "measurement",
            sa.String(length=16),
            nullable=False,
            comment="measured, replayed or simulated",
        ),
        sa.Column("gpu_model", sa.String(length=120), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["job_pk"], ["zeus_jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_pk", "decision_seq", name="uq_zeus_trials_decision"),
    )
    op.create_index(
        "uq_zeus_trials_live_key",
        "zeus_trials",
        ["job_pk", "dag_id", "task_id", "run_id", "map_index", "try_number", "attempt"],
        unique=True,
        sqlite_where=_LIVE,
        postgresql_where=_LIVE,
    )
    op.create_index("ix_zeus_trials_arm", "zeus_trials", ["job_pk", "observed", "batch_size", "id"])
    op.create_index("ix_zeus_trials_phase", "zeus_trials", ["job_pk", "phase", "decision_seq"])
    op.create_index("ix_zeus_trials_status", "zeus_trials", ["job_pk", "status"])
    op.create_index(
        "ix_zeus_trials_ti", "zeus_trials", ["dag_id", "task_id", "run_id", "map_index"]
    )
    op.create_table(
        "zeus_power_profiles",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=120), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("power_limit_w", sa.Integer(), nullable=False),
        sa.Column("avg_power_w", sa.Float(), nullable=False),
        sa.Column("steps_per_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_pk"], ["zeus_jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "job_pk",
            "batch_size",
            "gpu_model",
            "gpu_count",
            "power_limit_w",
            name="uq_zeus_power_profiles",
        ),
    )
    op.create_table(
        "zeus_gpu_leases",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("host", sa.String(length=250), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=120), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column(
            "original_limit_w",
            sa.Integer(),
            nullable=False,
            comment="the limit to put back if the task dies without restoring it",
        ),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("host", "gpu_uuid", name="uq_zeus_gpu_leases_gpu"),
    )


def downgrade() -> None:
    op.drop_table("zeus_gpu_leases")
    op.drop_table("zeus_power_profiles")
    op.drop_table("zeus_trials")
    op.drop_table("zeus_jobs")
