"""Trials: how many training steps each try ran.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

* ``steps``: the training steps the try ran, profiled ones included (``TrainingRun.steps``).
  NULL: a trial recorded before this revision.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.add_column(
            sa.Column(
                "steps",
                sa.Integer(),
                nullable=True,
                comment="training steps the try ran; NULL: recorded before revision 0011",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.drop_column("steps")
