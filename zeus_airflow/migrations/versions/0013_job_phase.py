"""Trials: the job's phase after the try.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

* ``job_phase``: where the job stood once the try was recorded, as the Zeus policy reckons it
  (``pruning``, ``sampling`` or ``infeasible``). Every surface (the fleet page, the job
  page, ``zeus-airflow report``, ``runs`` and the XComs) shows the latest recorded one, so
  the fleet page need not replay each job's history to agree with the report. NULL for
  tries before this revision, for tries another policy decided, and where the store could
  not take it; those show the latest decision's phase until the job's next run.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

COMMENT = "the job's phase after the try (pruning, sampling or infeasible)"


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.add_column(sa.Column("job_phase", sa.String(16), nullable=True, comment=COMMENT))


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.drop_column("job_phase")
