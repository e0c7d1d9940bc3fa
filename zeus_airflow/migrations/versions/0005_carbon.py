"""Trials: carbon intensity, emissions and energy cost, and the carbon-aware start's plan.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

* ``carbon_zone``, ``carbon_intensity_g_per_kwh`` (mean over the try's span),
  ``carbon_provenance`` (live, forecast, file, fixed or fallback), ``carbon_note`` (why it
  fell back), ``emissions_g`` and ``energy_cost`` (the price's currency): the try's figures.
* ``start_delay_s``, ``expected_emissions_g``, ``unshifted_intensity_g_per_kwh`` and
  ``start_reason``: the recurrence's start plan, on each of its tries.
All nullable: trials without a carbon zone, and every trial before this revision, have none.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("carbon_zone", sa.String(length=64), "grid zone of the carbon figures"),
    ("carbon_intensity_g_per_kwh", sa.Float(), "mean gCO2e/kWh over the try's span"),
    ("carbon_provenance", sa.String(length=16), "live, forecast, file, fixed or fallback"),
    ("carbon_note", sa.Text(), "why the intensity fell back"),
    ("emissions_g", sa.Float(), "gCO2e of the try's training and setup energy"),
    ("energy_cost", sa.Float(), "energy cost in the price's currency"),
    ("start_delay_s", sa.Float(), "the carbon-aware start's delay of the recurrence"),
    ("expected_emissions_g", sa.Float(), "gCO2e the start plan expected"),
    (
        "unshifted_intensity_g_per_kwh",
        sa.Float(),
        "forecast gCO2e/kWh had the recurrence started when planned",
    ),
    ("start_reason", sa.Text(), "why the start was chosen"),
)


def upgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        for name, kind, comment in _COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True, comment=comment))


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        for name, _, _ in reversed(_COLUMNS):
            batch.drop_column(name)
