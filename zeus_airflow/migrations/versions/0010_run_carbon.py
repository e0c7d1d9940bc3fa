"""Carbon and price figures belong to the run: ``zeus_run_carbon``, one row per run.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

A run is one recurrence (an Airflow task instance's try: job version, dag_id, task_id,
run_id, map_index, try_number). Its row holds what the runs table showed from its tries'
rows: ``emissions_g`` and ``energy_cost`` summed over its tries (NULL when one lacks them),
the zone, intensity, provenance and note of its last try (the highest ``decision_seq``), and
the start plan (``start_delay_s``, ``expected_emissions_g``, ``unshifted_intensity_g_per_kwh``,
``start_reason``), which every try carried. The tries' carbon columns (revision 0005) are
carried over, then dropped. The downgrade puts each run's figures back on its last try.
"""

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_KEY = ("job_pk", "dag_id", "task_id", "run_id", "map_index", "try_number")
_SUMMED = ("emissions_g", "energy_cost")
_LAST = (
    "carbon_zone",
    "carbon_intensity_g_per_kwh",
    "carbon_provenance",
    "carbon_note",
    "start_delay_s",
    "expected_emissions_g",
    "unshifted_intensity_g_per_kwh",
    "start_reason",
)
_TRIAL_COLUMNS = (  # as revision 0005 added them
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


def _columns() -> list[Any]:
    return [
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_pk",
            sa.Integer(),
            sa.ForeignKey("zeus_jobs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column(
            "carbon_zone",
            sa.String(length=64),
            nullable=False,
            comment="grid zone of the carbon figures",
        ),
        sa.Column(
            "carbon_intensity_g_per_kwh",
            sa.Float(),
            comment="mean gCO2e/kWh over the span of the run's last try",
        ),
        sa.Column(
            "carbon_provenance",
            sa.String(length=16),
            comment="live, forecast, file, fixed or fallback: the last try's intensity's",
        ),
        sa.Column("carbon_note", sa.Text(), comment="why the last try's intensity fell back"),
        sa.Column(
            "emissions_g",
            sa.Float(),
            comment="gCO2e of the training and setup energy of every try, each over its own span",
        ),
        sa.Column(
            "energy_cost", sa.Float(), comment="energy cost of every try in the price's currency"
        ),
        sa.Column("start_delay_s", sa.Float(), comment="the carbon-aware start's delay"),
        sa.Column("expected_emissions_g", sa.Float(), comment="gCO2e the start plan expected"),
        sa.Column(
            "unshifted_intensity_g_per_kwh",
            sa.Float(),
            comment="forecast gCO2e/kWh had the run started when planned",
        ),
        sa.Column("start_reason", sa.Text(), comment="why the start was chosen"),
    ]


def _run_carbon() -> sa.TableClause:
    return sa.table("zeus_run_carbon", *(sa.column(c.name) for c in _columns()))


def _trials(*names: str) -> sa.TableClause:
    return sa.table("zeus_trials", *(sa.column(n) for n in ("id", "decision_seq", *_KEY, *names)))


def upgrade() -> None:
    table = op.create_table(
        "zeus_run_carbon", *_columns(), sa.UniqueConstraint(*_KEY, name="uq_zeus_run_carbon")
    )
    trials = _trials(*_SUMMED, *_LAST)
    rows = op.get_bind().execute(
        sa.select(trials).where(trials.c.carbon_zone.is_not(None)).order_by(trials.c.decision_seq)
    )
    runs: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for row in rows:
        runs[tuple(getattr(row, k) for k in _KEY)].append(row)
    carried = [
        {
            **dict(zip(_KEY, key, strict=True)),
            **{name: getattr(tries[-1], name) for name in _LAST},
            **{name: _sum([getattr(t, name) for t in tries]) for name in _SUMMED},
        }
        for key, tries in runs.items()
    ]
    if carried:
        op.bulk_insert(table, carried)
    with op.batch_alter_table("zeus_trials") as batch:
        for name, _, _ in reversed(_TRIAL_COLUMNS):
            batch.drop_column(name)


def _sum(values: list[Any]) -> Any:
    return None if None in values else sum(values)


def downgrade() -> None:
    with op.batch_alter_table("zeus_trials") as batch:
        for name, kind, comment in _TRIAL_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True, comment=comment))
    bind = op.get_bind()
    trials, table = _trials(), _run_carbon()
    last = (
        sa.select(sa.func.max(trials.c.decision_seq))
        .where(*(trials.c[k] == table.c[k] for k in _KEY))
        .scalar_subquery()
    )
    found = bind.execute(
        sa.select(table, last.label("decision_seq")).where(last.is_not(None))
    ).all()
    for run in found:
        bind.execute(
            sa.update(_trials(*_SUMMED, *_LAST))
            .where(
                sa.column("job_pk") == run.job_pk,
                sa.column("decision_seq") == run.decision_seq,
            )
            .values({name: getattr(run, name) for name in (*_SUMMED, *_LAST)})
        )
    op.drop_table("zeus_run_carbon")
