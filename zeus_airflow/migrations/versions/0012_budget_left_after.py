"""Trials: the exploration budget left is the figure after the try, not before it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

* ``budget_left_runs`` now holds the budget left after the try, as the budget's books reckon
  it (the summary, the XComs and the UI show the same figure); trials recorded before this
  revision hold the figure when they were decided. Only the comment changes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _comment(text: str) -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.alter_column(
            "budget_left_runs", existing_type=sa.Float(), existing_nullable=True, comment=text
        )


def upgrade() -> None:
    _comment("exploration budget left after the try, in Default runs")


def downgrade() -> None:
    _comment("exploration budget left when the try was decided, in Default runs")
