"""Trials: how the GPUs' power limits could be changed.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

* ``power_control``: ``zeusd`` (through the privileged daemon), ``nvml`` (directly) or
  ``none`` (measured at the limits found: no permission, a MIG instance, measure mode), so
  that the UI can say a limit was set through zeusd. NULL: a replayed or simulated GPU, or
  a trial recorded before this revision.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.add_column(
            sa.Column(
                "power_control",
                sa.String(16),
                nullable=True,
                comment="how the limits could be changed: zeusd, nvml or none; NULL: a "
                "replayed or simulated GPU, or recorded before revision 0009",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.drop_column("power_control")
