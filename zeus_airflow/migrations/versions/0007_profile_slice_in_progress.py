"""Power profiles: a slice in progress, kept between runs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

* ``measured_steps``, ``measured_s``: set on the one row per profile that holds the measured
  part of a slice a run ended in (steps, and seconds on the device's clock); its
  ``avg_power_w`` and ``steps_per_s`` are over that part. The next run of the size continues
  the slice. Such a row is no measurement: no optimum, search, fleet translation or report
  reads it until the slice is complete (then both are NULL).
Both nullable: NULL is a complete measurement, as every row before this revision is.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("measured_steps", sa.Integer(), "slice in progress: steps measured so far; NULL: complete"),
    ("measured_s", sa.Float(), "slice in progress: device seconds measured so far; NULL: complete"),
)


def upgrade() -> None:
    with op.batch_alter_table("zeus_power_profiles") as batch:
        for name, kind, comment in _COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True, comment=comment))


def downgrade() -> None:
    # Rows of slices in progress would read as measurements without the columns.
    op.execute("DELETE FROM zeus_power_profiles WHERE measured_steps IS NOT NULL")
    with op.batch_alter_table("zeus_power_profiles") as batch:
        for name, _, _ in reversed(_COLUMNS):
            batch.drop_column(name)
