"""Revision 0010 moves the carbon figures from the tries' rows to their run's, data carried
over (and back, by the downgrade); on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from alembic import command
from sqlalchemy import column, create_engine, insert, inspect, select, table

from zeus_airflow.core.store import schema
from zeus_airflow.core.store.tables import RUN_KEY, run_carbon

NOW = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
TRIALS = table(
    "zeus_trials",
    *(
        column(name)
        for name in (
            "job_pk", "decision_seq", "dag_id", "task_id", "run_id", "map_index", "try_number",
            "attempt", "status", "phase", "batch_size", "observed", "measurement", "gpu_model",
            "gpu_count", "started_at", "heartbeat_at", "energy_j", "carbon_zone",
            "carbon_intensity_g_per_kwh", "carbon_provenance", "carbon_note", "emissions_g",
            "energy_cost", "start_delay_s", "expected_emissions_g",
            "unshifted_intensity_g_per_kwh", "start_reason",
        )
    ),
)  # fmt: skip
JOBS = table(
    "zeus_jobs",
    *(
        column(n)
        for n in ("id", "job_id", "version", "fingerprint", "config_json", "seed", "decisions")
    ),
    column("active"),
    column("created_at"),
)


def _try(seq: int, run_id: str, try_number: int = 1, **carbon: Any) -> dict[str, Any]:
    return {
        "job_pk": 1,
        "decision_seq": seq,
        "dag_id": "d",
        "task_id": "t",
        "run_id": run_id,
        "map_index": -1,
        "try_number": try_number,
        "attempt": seq,
        "status": "failed" if seq == 1 else "succeeded",
        "phase": "pruning",
        "batch_size": 32,
        "observed": True,
        "measurement": "replayed",
        "gpu_model": "V100",
        "gpu_count": 1,
        "started_at": NOW,
        "heartbeat_at": NOW,
        "energy_j": 1000.0,
        **{c.name: None for c in run_carbon.c if c.name not in ("id", *RUN_KEY)},
        **carbon,
    }


PLAN = {"start_delay_s": 600.0, "expected_emissions_g": 9.0, "start_reason": "the dip"}
RUN_1 = (  # two tries: the second's intensity is shown, the emissions add up
    _try(1, "r1", carbon_zone="DE", carbon_intensity_g_per_kwh=300.0, carbon_provenance="live",
         emissions_g=2.0, energy_cost=0.5, **PLAN),
    _try(2, "r1", carbon_zone="DE", carbon_intensity_g_per_kwh=100.0, carbon_provenance="fallback",
         carbon_note="HTTP 503", emissions_g=3.0, energy_cost=0.25, **PLAN),
)  # fmt: skip
RUN_2 = (_try(3, "r2"),)  # no carbon zone: no row
RUN_3 = (  # a price missing on one try: no cost for the run
    _try(4, "r3", carbon_zone="FR", carbon_intensity_g_per_kwh=50.0, carbon_provenance="fixed",
         emissions_g=1.0, energy_cost=None),
    _try(5, "r3", carbon_zone="FR", carbon_intensity_g_per_kwh=50.0, carbon_provenance="fixed",
         emissions_g=1.5, energy_cost=0.1),
)  # fmt: skip


def _migrate(url: str, to: str, down: bool = False) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        config = schema.alembic_config()
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, to)
    engine.dispose()


@pytest.fixture
def at_0009(db_url: str) -> str:
    _migrate(db_url, "0009")
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            insert(JOBS).values(
                id=1, job_id="j", version=1, fingerprint="f", config_json="{}", seed=1,
                decisions=5, active=True, created_at=NOW,
            )
        )  # fmt: skip
        conn.execute(insert(TRIALS), [*RUN_1, *RUN_2, *RUN_3])
    engine.dispose()
    return db_url


def test_the_runs_figures_are_carried_over_and_the_tries_columns_dropped(at_0009: str) -> None:
    _migrate(at_0009, "0010")
    engine = create_engine(at_0009)
    with engine.connect() as conn:
        rows = {r.run_id: r for r in conn.execute(select(run_carbon))}
        columns = {c["name"] for c in inspect(conn).get_columns("zeus_trials")}
    engine.dispose()
    assert set(rows) == {"r1", "r3"}
    r1, r3 = rows["r1"], rows["r3"]
    assert (r1.job_pk, r1.dag_id, r1.task_id, r1.map_index, r1.try_number) == (1, "d", "t", -1, 1)
    assert (r1.emissions_g, r1.energy_cost) == (5.0, 0.75)
    assert (r1.carbon_zone, r1.carbon_intensity_g_per_kwh, r1.carbon_provenance) == (
        "DE",
        100.0,
        "fallback",
    )
    assert (r1.carbon_note, r1.start_delay_s, r1.start_reason) == ("HTTP 503", 600.0, "the dip")
    assert (r3.emissions_g, r3.energy_cost, r3.carbon_zone) == (2.5, None, "FR")
    assert not columns & {"carbon_zone", "emissions_g", "start_delay_s", "energy_cost"}


def test_the_downgrade_puts_each_runs_figures_back_on_its_last_try(at_0009: str) -> None:
    _migrate(at_0009, "0010")
    _migrate(at_0009, "0009", down=True)
    engine = create_engine(at_0009)
    with engine.connect() as conn:
        tries = {r.decision_seq: r for r in conn.execute(select(TRIALS, column("id")))}
        tables = inspect(conn).get_table_names()
    engine.dispose()
    assert "zeus_run_carbon" not in tables
    assert (tries[2].emissions_g, tries[2].carbon_intensity_g_per_kwh) == (5.0, 100.0)
    assert (tries[2].carbon_zone, tries[2].start_reason) == ("DE", "the dip")
    assert tries[1].carbon_zone is None and tries[3].carbon_zone is None
    assert (tries[5].emissions_g, tries[5].energy_cost) == (2.5, None)
