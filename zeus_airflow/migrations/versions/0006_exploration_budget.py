"""Trials: the exploration budget's figures.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

* ``default_cost``: what the try's training steps would have cost at the GPUs' maximum power
  limit (the Default configuration's limit), in the job's cost units.
* ``budget_left_runs``: the exploration budget left when the try was decided, in Default
  runs' worth.
Both nullable: trials before this revision have none (the budget then prices a default-size
run at its own cost).
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("default_cost", "what the try's training steps would have cost at the maximum power limit"),
    ("budget_left_runs", "exploration budget left when the try was decided, in Default runs"),
)


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        for name, comment in _COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True, comment=comment))


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
