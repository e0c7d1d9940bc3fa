"""Trials: results recorded late, from the outbox.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

* ``recorded_late_at``: when a result that the store could not take at the end of training
  (an outage, a read-only or full database) reached it from the outbox a later run drains
  (``core/domain/outbox.py``). NULL: recorded on time, as every trial before this revision was.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.add_column(
            sa.Column(
                "recorded_late_at",
                sa.DateTime(timezone=True),
                nullable=True,
                comment="when a result the store could not take at the end of training reached "
                "it from the outbox; NULL: recorded on time",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.drop_column("recorded_late_at")
