"""Trials: setup apart from training, the early-stop bound, a lease per trial.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

* ``setup_energy_j`` / ``setup_time_s``: measured before training started (not cost).
* ``early_stop_cost``: the bound a try ran under; a size pruned by early stops comes back
  once the bound has grown past the one that stopped it.
* ``expires_at``: a running trial expires after a few missed heartbeats, not a flat lease.
  Trials running during the upgrade get the old flat lease (600 s after their last beat).
* ``status`` may now be ``invalid`` (the train function broke its contract); no schema change.
"""

from datetime import timedelta

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_OLD_LEASE = timedelta(seconds=600)


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.add_column(
            sa.Column(
                "setup_energy_j",
                sa.Float(),
                nullable=True,
                comment="energy before training started; not in the cost",
            )
        )
        batch.add_column(sa.Column("setup_time_s", sa.Float(), nullable=True))
        batch.add_column(
            sa.Column(
                "early_stop_cost",
                sa.Float(),
                nullable=True,
                comment="the early-stop bound the try ran under",
            )
        )
        batch.add_column(
            sa.Column(
                "expires_at",
                sa.DateTime(timezone=True),
                nullable=True,
                comment="a running trial not heard from by then expires",
            )
        )
    trials = sa.table(
        "zeus_trials",
        sa.column("id", sa.Integer()),
        sa.column("status", sa.String()),
        sa.column("heartbeat_at", sa.DateTime(timezone=True)),
        sa.column("expires_at", sa.DateTime(timezone=True)),
    )
    conn = op.get_bind()
    running = conn.execute(
        sa.select(trials.c.id, trials.c.heartbeat_at).where(trials.c.status == "running")
    ).all()
    for trial_id, heartbeat_at in running:
        conn.execute(
            sa.update(trials)
            .where(trials.c.id == trial_id)
            .values(expires_at=heartbeat_at + _OLD_LEASE)
        )


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.drop_column("expires_at")
        batch.drop_column("early_stop_cost")
        batch.drop_column("setup_time_s")
        batch.drop_column("setup_energy_j")
