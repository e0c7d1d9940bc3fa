"""The operator's carbon options through real Airflow (``dag.test()``): its parse-time checks,
a run's emissions in the XComs and the summary, and the Electricity Maps API reached through
an Airflow Connection (a local server), falling back when it fails."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fixtures_airflow import daily, rendered_fields, sync_dag, xcoms
from fixtures_grid import FakeElectricityMaps, Reply, em_forecast, em_history, em_item
from fixtures_store import run_carbon, stored_trials

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.operators.replay import replay_job_settings, replay_train
from zeus_airflow.operators.summary import CARBON_XCOM_KEYS

pytestmark = pytest.mark.usefixtures("dag_test")


def carbon_dag(dag_id: str, **operator_args: Any) -> Any:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train",
            heartbeat_s=5,
            train=replay_train,
            device="replay:v100:cifar100",
            **replay_job_settings("v100", "cifar100"),
            **operator_args,
        )
    return sync_dag(dag)


def test_a_deadline_without_a_zone_is_refused_when_the_dag_is_parsed() -> None:
    from zeus_airflow import ZeusTrainOperator

    settings = replay_job_settings("v100", "cifar100")
    with pytest.raises(ConfigError, match="start_deadline='6h' is invalid without carbon_zone"):
        ZeusTrainOperator(task_id="t", train=replay_train, start_deadline="6h", **settings)
    with pytest.raises(
        ConfigError,
        match="carbon_objective='greenest' is invalid: expected one of emissions, cost, mix",
    ):
        ZeusTrainOperator(
            task_id="t",
            train=replay_train,
            carbon_zone="DE",
            carbon_objective="greenest",
            **settings,
        )
    with pytest.raises(ConfigError, match="carbon_source='watttime:CAISO' is invalid"):
        ZeusTrainOperator.partial(task_id="t", train=replay_train, carbon_source="watttime:CAISO")
    # A template is checked once rendered, at run time.
    ZeusTrainOperator(
        task_id="t",
        train=replay_train,
        carbon_zone="{{ params.zone }}",
        start_deadline="{{ data_interval_end.add(hours=8).isoformat() }}",
        **settings,
    )


def test_a_run_publishes_its_emissions_and_cost(zeus_store_url: str) -> None:
    dag = carbon_dag("carbon_fixed", carbon_zone="XX", carbon_source="fixed:250:80")
    run = dag.test(logical_date=daily(1))
    pushed = xcoms("carbon_fixed", run.run_id, "train")
    assert set(CARBON_XCOM_KEYS) <= set(pushed)
    kwh = (pushed["energy_j"] + pushed["setup_energy_j"]) / 3.6e6
    assert pushed["emissions_g"] == pytest.approx(kwh * 250)
    assert pushed["energy_cost"] == pytest.approx(kwh * 80 / 1000)
    assert (pushed["carbon_provenance"], pushed["carbon_zone"], pushed["start_delay_s"]) == (
        "fixed",
        "XX",
        None,
    )
    assert (
        "gCO2e (fixed, XX)" in rendered_fields("carbon_fixed", run.run_id, "train")["zeus_summary"]
    )
    row = run_carbon(zeus_store_url, run.run_id)  # the run's own row
    assert (row.carbon_zone, row.carbon_provenance, row.carbon_intensity_g_per_kwh) == (
        "XX",
        "fixed",
        250.0,
    )
    assert row.emissions_g == pytest.approx(pushed["emissions_g"])
    assert row.energy_cost == pytest.approx(pushed["energy_cost"])
    assert row.start_delay_s is None and row.start_reason is None
    assert rendered_fields("carbon_fixed", run.run_id, "train")["carbon_source"] == "fixed:250:80"


def test_without_a_zone_no_carbon_source_is_shown_as_used(zeus_store_url: str) -> None:
    """Issue 37: the Rendered Templates said ``electricitymaps`` for a job with no zone."""
    run = carbon_dag("carbon_none").test(logical_date=daily(1))
    assert rendered_fields("carbon_none", run.run_id, "train")["carbon_source"] is None


def test_electricity_maps_through_a_connection_and_its_fallback(
    zeus_store_url: str, electricity_maps: FakeElectricityMaps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    monkeypatch.setenv(
        "AIRFLOW_CONN_EM_LOCAL",
        json.dumps(
            {
                "conn_type": "electricitymaps",
                "password": "tok",
                "extra": {"base_url": electricity_maps.url, "retries": 0, "cache_ttl_s": 0},
            }
        ),
    )
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    electricity_maps.script(
        Reply(body=em_history(hour, [222, 222])),  # an hour boundary
        Reply(body=em_item(hour, 222)),
    )
    dag = carbon_dag("carbon_em", carbon_zone="DE", carbon_conn_id="em_local")
    live = xcoms("carbon_em", dag.test(logical_date=daily(1)).run_id, "train")
    assert (live["carbon_provenance"], live["carbon_intensity_g_per_kwh"]) == (
        "live",
        pytest.approx(222.0),
    )
    assert electricity_maps.requests[0][1]["auth-token"] == "tok"

    electricity_maps.script(Reply(body=b"{not json"), Reply(body=b"{not json"))
    fell_back = xcoms("carbon_em", dag.test(logical_date=daily(2)).run_id, "train")
    # A time-weighted mean over the try's span: 475 to within rounding.
    assert (fell_back["carbon_provenance"], fell_back["carbon_intensity_g_per_kwh"]) == (
        "fallback",
        pytest.approx(475.0),
    )

    # Planning reads the forecast (and the present), then says why it starts now (the
    # next two hours are the cleanest, so nothing beats now); the accounting reads the present.
    electricity_maps.script(
        Reply(body=em_history(hour, [100, 100])),
        Reply(body=em_item(hour, 100)),
        Reply(body=em_forecast(hour, [100, 100, 900])),
        Reply(body=em_history(hour, [100, 100])),
        Reply(body=em_item(hour, 100)),
    )
    planned = carbon_dag(
        "carbon_em_plan",
        carbon_zone="DE",
        carbon_conn_id="em_local",
        start_deadline="2h",
        expected_duration="10min",
    )
    plan_run = planned.test(logical_date=daily(1)).run_id
    pushed = xcoms("carbon_em_plan", plan_run, "train")
    assert pushed["start_delay_s"] == 0.0
    assert "beat starting now" in pushed["start_reason"]
    row = run_carbon(zeus_store_url, plan_run)
    assert (row.start_delay_s, row.start_reason, row.carbon_provenance) == (
        0.0,
        pushed["start_reason"],
        "live",
    )
    assert row.unshifted_intensity_g_per_kwh == pytest.approx(100.0)


def test_planning_that_fails_starts_now_and_the_run_still_trains(
    zeus_store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    missing = tmp_path / "no-such-trace.csv"
    dag = carbon_dag(
        "carbon_no_trace",
        carbon_zone="DE",
        carbon_source=f"csv:{missing}",
        start_deadline="6h",
        expected_duration="1h",
    )
    pushed = xcoms("carbon_no_trace", dag.test(logical_date=daily(1)).run_id, "train")
    assert pushed["start_delay_s"] == 0.0 and pushed["reached_target"] is True
    assert "no forecast (cannot read the intensity trace" in pushed["start_reason"]
    # A time-weighted mean over the try's span: 475 to within rounding.
    assert (pushed["carbon_provenance"], pushed["carbon_intensity_g_per_kwh"]) == (
        "fallback",
        pytest.approx(475.0),
    )

    from zeus_airflow.core.carbon import service

    def broken(*args: Any) -> Any:
        raise RuntimeError("the history reader broke")

    monkeypatch.setattr(service, "expected_run", broken)
    dag = carbon_dag(
        "carbon_broken_plan", carbon_zone="DE", carbon_source="fixed:300", start_deadline="6h"
    )
    pushed = xcoms("carbon_broken_plan", dag.test(logical_date=daily(1)).run_id, "train")
    assert pushed["start_delay_s"] == 0.0 and pushed["emissions_g"] > 0
    assert "could not be planned (RuntimeError: the history reader broke)" in pushed["start_reason"]


def write_clean_soon_trace(path: str, zones: list[str]) -> None:
    """A forecast every 5 s for each zone: 800 g now, 80 g from 10 s to 300 s ahead."""
    from datetime import UTC, datetime, timedelta
    from pathlib import Path

    now = datetime.now(UTC)
    rows = ["datetime,zone,carbon_intensity_g_per_kwh"]
    for zone in zones:
        for i in range(-12, 120):
            grams = 80 if 10 <= 5 * i < 300 else 800
            rows.append(f"{(now + timedelta(seconds=5 * i)).isoformat()},{zone},{grams}")
    Path(path).write_text("\n".join(rows) + "\n")


def test_a_mapped_deferred_start_records_its_delay(zeus_store_url: str, tmp_path: Any) -> None:
    """Issue 37: a mapped instance deferred into a clean slot keeps its delay in its XComs
    and the store (the forecast is written by an upstream task, just before the plan)."""
    from airflow.models.xcom import XComModel
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from zeus_airflow import ZeusTrainOperator

    zones, trace = ["AA", "BB"], str(tmp_path / "forecast.csv")
    with DAG("carbon_mapped_defer", schedule="@daily", start_date=daily(0), catchup=False) as dag:
        forecast = PythonOperator(
            task_id="forecast", python_callable=write_clean_soon_trace, op_args=[trace, zones]
        )
        forecast >> ZeusTrainOperator.partial(
            task_id="train",
            heartbeat_s=5,
            train=replay_train,
            device="replay:v100:cifar100",
            carbon_source="csv:" + trace,
            start_deadline="5min",
            expected_duration="5s",
            **replay_job_settings("v100", "cifar100"),
        ).expand(carbon_zone=zones)
    run = sync_dag(dag).test(logical_date=daily(1))
    with create_session() as session:
        rows = session.execute(
            select(XComModel.map_index, XComModel.value).where(
                XComModel.dag_id == "carbon_mapped_defer",
                XComModel.run_id == run.run_id,
                XComModel.key == "start_delay_s",
            )
        ).all()
    delays = {i: XComModel.deserialize_value(_Value(v)) for i, v in rows}
    assert set(delays) == {0, 1}
    # The instances run one after the other: the first waits for the clean slot, the
    # second starts in it.
    assert None not in delays.values() and max(delays.values()) >= 5, delays
    stored = {t.map_index: t for t in stored_trials(zeus_store_url)}
    assert {i: t.start_delay_s for i, t in stored.items()} == delays
    waited = max(delays, key=lambda i: delays[i])
    assert stored[waited].unshifted_intensity_g_per_kwh == pytest.approx(800.0)


class _Value:
    def __init__(self, value: Any) -> None:
        self.value = value
