"""Trials: the host's CPU package and DRAM energy (RAPL) beside the GPUs'.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

* ``cpu_energy_j`` / ``dram_energy_j``: measured over the same training as ``energy_j`` where
  the host's RAPL counters are readable, beside real GPUs only; NULL where not measured (and
  for every trial recorded before this revision). Not in ``cost`` unless the job sets
  ``cost_includes_cpu``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.add_column(
            sa.Column(
                "cpu_energy_j",
                sa.Float(),
                nullable=True,
                comment="host CPU package energy (RAPL) over training; NULL: not measured",
            )
        )
        batch.add_column(
            sa.Column(
                "dram_energy_j",
                sa.Float(),
                nullable=True,
                comment="host DRAM energy (RAPL) over training; NULL: not measured",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        batch.drop_column("dram_energy_j")
        batch.drop_column("cpu_energy_j")
