"""Trials: the optimum a try's profile gives, and what observe mode would have saved.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

* ``optimal_power_limit_w``: the optimum the profile gives. ``power_limit_w`` is now always the
  limit the try trained at; rows written before this revision by ``observe``-mode jobs hold the
  optimum there (they cannot be told apart afterwards), so their Default estimate scales from
  the optimum as before.
* ``would_save_energy_j`` / ``would_save_time_s``: observe mode, what training at the optimum
  would have saved (negative: it would have cost more).
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.alter_column(
            "power_limit_w",
            existing_type=sa.Integer(),
            existing_nullable=True,
            comment="the limit it trained at after profiling",
        )
        batch.add_column(
            sa.Column(
                "optimal_power_limit_w",
                sa.Integer(),
                nullable=True,
                comment="the optimum its profile gives",
            )
        )
        batch.add_column(
            sa.Column(
                "would_save_energy_j",
                sa.Float(),
                nullable=True,
                comment="observe mode: energy training at the optimum would have saved",
            )
        )
        batch.add_column(sa.Column("would_save_time_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.drop_column("would_save_time_s")
        batch.drop_column("would_save_energy_j")
        batch.drop_column("optimal_power_limit_w")
        batch.alter_column(
            "power_limit_w", existing_type=sa.Integer(), existing_nullable=True, comment=None
        )
