"""A run's date is named by one function on every surface (``naming.run_date``): its logical
date from Airflow's database where known, else the run id's date marked ``(id)``."""

from __future__ import annotations

import argparse
import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from zeus_airflow.cli import store as cli_store
from zeus_airflow.cli import views
from zeus_airflow.core.common.naming import run_date, run_id_date
from zeus_airflow.core.domain import TrialRecord
from zeus_airflow.core.reports import RunRecord
from zeus_airflow.plugins.queries import RunRow

SCHEDULED = "scheduled__2026-01-02T00:00:00+00:00"
"""A daily data-interval run: Airflow names it after its run-after date, the interval's end;
its logical date is the day before."""
LOGICAL = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [
        (SCHEDULED, datetime(2026, 1, 2, tzinfo=UTC)),
        ("manual__2026-01-02T03:04:05.123456+00:00", datetime(2026, 1, 2, 3, 4, 5, 123456, UTC)),
        ("manual__2026-01-02T03:04:05+00:00_AbCdEf12", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("backfill__2026-01-02T00:00:00+02:00", datetime(2026, 1, 1, 22, tzinfo=UTC)),
        ("asset_triggered__2026-01-02T00:00:00", datetime(2026, 1, 2, tzinfo=UTC)),
        ("my-own-run", None),
        ("manual__not-a-date", None),
    ],
)
def test_the_date_in_a_run_id(run_id: str, expected: datetime | None) -> None:
    assert run_id_date(run_id) == expected


def test_the_logical_date_names_the_run_else_the_run_ids_date_marked() -> None:
    assert run_date(SCHEDULED, LOGICAL) == "2026-01-01 00:00"
    east = timezone(timedelta(hours=2))
    assert run_date(SCHEDULED, datetime(2026, 1, 1, 2, tzinfo=east)) == "2026-01-01 00:00"
    assert run_date(SCHEDULED, None) == "2026-01-02 00:00 (id)"
    assert run_date("my-own-run", None) is None
    assert run_date("my-own-run", LOGICAL) == "2026-01-01 00:00"


def _trial(run_id: str, map_index: int = -1) -> TrialRecord:
    values = {f.name: None for f in dataclasses.fields(TrialRecord)}
    values.update(run_id=run_id, dag_id="dag", map_index=map_index)
    return TrialRecord(**values)  # type: ignore[arg-type]


def test_runs_and_the_job_page_name_a_run_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --db (the store found through Airflow), ``runs`` reads the logical dates as
    the UI does; its run column and the job page's date column then read the same."""
    from zeus_airflow import airflow_db

    asked: list[tuple[str, str]] = []

    def of_dag_runs(keys: object) -> dict[tuple[str, str], datetime]:
        asked.extend(keys)  # type: ignore[call-overload]
        return {("dag", SCHEDULED): LOGICAL}

    monkeypatch.setattr(airflow_db, "cli_logical_dates", of_dag_runs)
    trials = [_trial(SCHEDULED), _trial("manual__2026-01-05T00:00:00+00:00", 3)]
    dates = cli_store.logical_dates(argparse.Namespace(db=None), trials)
    assert asked == [("dag", t.run_id) for t in trials]
    rows = [{**dataclasses.asdict(t), "logical_date": dates.get(("dag", t.run_id))} for t in trials]
    assert [views.run_label(r) for r in rows] == ["2026-01-01 00:00", "2026-01-05 00:00 (id)[3]"]
    for row, trial in zip(rows, trials, strict=True):
        ui = RunRow(_run(trial.run_id), dates.get(("dag", trial.run_id)))
        assert views.run_label({**row, "map_index": -1}) == ui.date


def _run(run_id: str) -> RunRecord:
    values = {f.name: None for f in dataclasses.fields(RunRecord)}
    values.update(run_id=run_id, dag_id="dag", map_index=-1)
    return RunRecord(**values)  # type: ignore[arg-type]


def test_with_db_runs_reads_no_airflow_database(monkeypatch: pytest.MonkeyPatch) -> None:
    from zeus_airflow import airflow_db

    monkeypatch.setattr(airflow_db, "cli_logical_dates", lambda _: pytest.fail("read Airflow's DB"))
    assert cli_store.logical_dates(argparse.Namespace(db="sqlite://"), [_trial(SCHEDULED)]) == {}


def test_an_unreadable_airflow_database_falls_back_to_run_ids_dates(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from zeus_airflow import airflow_db

    def broken(_: object) -> dict[tuple[str, str], datetime]:
        raise RuntimeError("no such table: dag_run")

    monkeypatch.setattr(airflow_db, "cli_logical_dates", broken)
    assert cli_store.logical_dates(argparse.Namespace(db=None), [_trial(SCHEDULED)]) == {}
    assert "no such table: dag_run" in capsys.readouterr().err
    row = {**dataclasses.asdict(_trial(SCHEDULED)), "logical_date": None}
    assert views.run_label(row) == "2026-01-02 00:00 (id)"


def test_other_run_ids_are_cut_to_the_column() -> None:
    row = {"run_id": "x" * 40, "map_index": -1, "logical_date": None}
    assert views.run_label(row) == "x" * (views.RUN_ID_CHARS - 1) + "…"
