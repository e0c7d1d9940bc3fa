"""The start planner, the CSV trace, the fixed source and the carbon options' checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from zeus_airflow.core.carbon.accounting import span_emissions
from zeus_airflow.core.carbon.csvtrace import CsvTrace
from zeus_airflow.core.carbon.fixed import FixedSource
from zeus_airflow.core.carbon.options import CarbonOptions
from zeus_airflow.core.carbon.planner import ExpectedRun, StartPlan, plan_start
from zeus_airflow.core.carbon.signal import GridPoint, SourceError
from zeus_airflow.core.common.config import PARAMETER_CHECKS, ConfigError

T0 = datetime(2026, 6, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
KWH = 3.6e6


def hourly(values: list[float], prices: list[float] | None = None) -> list[GridPoint]:
    return [
        GridPoint(T0 + i * HOUR, T0 + (i + 1) * HOUR, v, "forecast", prices[i] if prices else None)
        for i, v in enumerate(values)
    ]


def test_the_cheapest_window_that_finishes_by_the_deadline_is_chosen() -> None:
    forecast = hourly([500, 400, 100, 120, 90, 600])
    run = ExpectedRun(2 * 3600.0, 10 * KWH, "test")
    plan = plan_start(T0, T0 + 6 * HOUR, run, forecast)
    # two-hour windows: 100+120 (from 2 h) loses to 120+90 (from 3 h); 90+600 is worse.
    assert plan.start_at == T0 + 3 * HOUR
    assert plan.intensity_g_per_kwh == pytest.approx(105.0)
    assert plan.now_intensity_g_per_kwh == pytest.approx(450.0)
    assert plan.expected_emissions_g == pytest.approx(1050.0)
    assert plan.now_emissions_g == pytest.approx(4500.0)
    assert plan.delay_s == 3 * 3600 and plan.provenance == "forecast"
    assert "77 %" in plan.reason


def test_the_window_may_start_inside_an_interval() -> None:
    forecast = hourly([500, 100, 500, 500])
    plan = plan_start(T0, T0 + 4 * HOUR, ExpectedRun(1800.0, None, "guess"), forecast)
    assert T0 + HOUR <= plan.start_at <= T0 + 1.5 * HOUR
    assert plan.intensity_g_per_kwh == pytest.approx(100.0)
    assert plan.expected_emissions_g is None  # no energy expected: intensity only


def test_the_deadline_bounds_the_search() -> None:
    forecast = hourly([500, 400, 100, 100])
    plan = plan_start(T0, T0 + 3 * HOUR, ExpectedRun(2 * 3600.0, KWH, "x"), forecast)
    assert plan.start_at == T0 + HOUR  # 400+100; 100+100 would end after the deadline
    assert plan.start_at + timedelta(seconds=7200) <= T0 + 3 * HOUR


@pytest.mark.parametrize(
    ("deadline", "expected_s", "reason"),
    [
        (T0 - HOUR, 600.0, "already passed"),
        (T0 + HOUR, 2 * 3600.0, "more than the 3600 s left"),
    ],
)
def test_no_room_before_the_deadline_starts_now(
    deadline: datetime, expected_s: float, reason: str
) -> None:
    plan = plan_start(T0, deadline, ExpectedRun(expected_s, KWH, "x"), hourly([900, 1]))
    assert plan.start_at == T0 and plan.delay_s == 0 and reason in plan.reason


def test_no_forecast_starts_now_and_says_why() -> None:
    plan = plan_start(T0, T0 + 6 * HOUR, ExpectedRun(600.0, KWH, "x"), [])
    assert plan.delay_s == 0 and "no forecast" in plan.reason


def test_a_flat_forecast_or_a_tiny_saving_starts_now() -> None:
    flat = plan_start(T0, T0 + 6 * HOUR, ExpectedRun(600.0, KWH, "x"), hourly([300] * 6))
    assert flat.delay_s == 0 and "beat starting now" in flat.reason
    tiny = plan_start(
        T0, T0 + 6 * HOUR, ExpectedRun(3600.0, KWH, "x"), hourly([300, 299, 300, 300, 300, 300])
    )
    assert tiny.delay_s == 0 and "only 0.3 %" in tiny.reason


@pytest.mark.parametrize(
    ("now_s", "live_from_s", "live_until_s"),
    [(2667.982497, 626.24958, 241.271949), (2905.827792, 170.864756, 257.384617)],
)
def test_equal_intensities_cut_at_odd_edges_are_no_saving(
    now_s: float, live_from_s: float, live_until_s: float
) -> None:
    # A live point with odd edges beside the forecast's hours, all at 100: the means over the
    # candidate spans differ in the last bits of a float, which was explained as "waiting
    # would cut the expected emissions by only 0.0 %".
    now = T0 + timedelta(seconds=now_s)
    live = GridPoint(
        now - timedelta(seconds=live_from_s), now + timedelta(seconds=live_until_s), 100, "live"
    )
    forecast = [live, *hourly([100, 100, 900])]
    plan = plan_start(now, now + 2 * HOUR, ExpectedRun(600.0, KWH, "x"), forecast)
    assert plan.delay_s == 0 and "beat starting now" in plan.reason, plan.reason


def test_a_forecast_one_value_over_a_span_plans_with_that_value_exactly() -> None:
    """Issue 37: a forecast every 10 s, 800 g until a clean slot; a plan made at an odd
    instant stored 800.0000000000002 g/kWh as the intensity of starting at once, which a
    run's time-shift saving is reckoned from."""
    points = [
        GridPoint(T0 + i * timedelta(seconds=10), T0 + (i + 1) * timedelta(seconds=10), g, "file")
        for i, g in enumerate([800.0] * 9 + [100.0] * 51)
    ]
    now = T0 + timedelta(microseconds=15838)
    plan = plan_start(now, now + timedelta(minutes=10), ExpectedRun(20.0, None, "x"), points)
    assert plan.delay_s > 0
    assert (plan.now_intensity_g_per_kwh, plan.intensity_g_per_kwh) == (800.0, 100.0)


def test_cost_and_mix_objectives_use_the_price() -> None:
    forecast = hourly([100, 500, 500], prices=[90.0, 10.0, 90.0])
    run = ExpectedRun(3600.0, KWH, "x")
    assert plan_start(T0, T0 + 3 * HOUR, run, forecast, "emissions").start_at == T0
    by_cost = plan_start(T0, T0 + 3 * HOUR, run, forecast, "cost")
    assert by_cost.start_at == T0 + HOUR and by_cost.price_per_mwh == pytest.approx(10.0)
    assert plan_start(T0, T0 + 3 * HOUR, run, forecast, "mix", 0.9).start_at == T0
    assert plan_start(T0, T0 + 3 * HOUR, run, forecast, "mix", 0.1).start_at == T0 + HOUR
    no_price = plan_start(T0, T0 + 3 * HOUR, run, hourly([100, 500, 500]), "cost")
    assert no_price.delay_s == 0 and "no price" in no_price.reason


def test_a_plan_survives_the_trip_through_the_triggerer() -> None:
    plan = plan_start(
        T0, T0 + 6 * HOUR, ExpectedRun(3600.0, KWH, "b=64"), hourly([500, 100, 500, 500, 500, 500])
    )
    assert StartPlan.from_json(plan.to_json()) == plan


def test_emissions_weigh_each_interval_by_its_overlap() -> None:
    points = hourly([100, 300], prices=[50.0, 150.0])
    found = span_emissions("DE", 2 * KWH, T0 + HOUR / 2, T0 + 3 * HOUR / 2, points)
    assert found.intensity_g_per_kwh == pytest.approx(200.0)
    assert found.emissions_g == pytest.approx(400.0)
    assert found.energy_cost == pytest.approx(0.2)  # 2 kWh at 100 per MWh
    assert found.provenance == "forecast"


def test_a_moment_long_run_is_priced_over_its_own_moment() -> None:
    # A replayed run woken at the start of a clean hour ends half a second into it: the
    # dirty hour before it started must not count (it did, as the second before the end).
    points = hourly([800, 100])
    woke = T0 + HOUR + timedelta(milliseconds=10)
    found = span_emissions("DE", KWH, woke, woke + timedelta(milliseconds=500), points)
    assert found.intensity_g_per_kwh == pytest.approx(100.0)
    empty = span_emissions("DE", KWH, woke, woke, points)  # an empty span: the moment before
    assert empty.intensity_g_per_kwh == pytest.approx(100.0)


def test_csv_trace_ours_and_an_electricity_maps_export(tmp_path: Path) -> None:
    ours = tmp_path / "ours.csv"
    ours.write_text(
        "datetime,zone,carbon_intensity_g_per_kwh,price_per_mwh\n"
        "2026-06-01T00:00:00Z,DE,400,80\n2026-06-01T01:00:00Z,DE,200,\n"
        "2026-06-01T00:00:00Z,FR,50,40\n"
    )
    trace = CsvTrace.load(ours)
    de = trace.points("DE", T0, T0 + 3 * HOUR)
    assert [(p.start, p.end, p.intensity_g_per_kwh, p.price_per_mwh, p.provenance) for p in de] == [
        (T0, T0 + HOUR, 400.0, 80.0, "file"),
        (T0 + HOUR, T0 + 2 * HOUR, 200.0, None, "file"),
    ]
    with pytest.raises(SourceError, match="no zone 'PL'"):
        trace.points("PL", T0, T0 + HOUR)

    export = tmp_path / "export.csv"
    export.write_text(
        "Datetime (UTC),Country,Zone name,Zone id,Carbon intensity gCO₂eq/kWh (direct),"
        "Carbon intensity gCO₂eq/kWh (Life cycle),Data source\n"
        "2026-06-01 00:00:00,Germany,Germany,DE,300,350,x\n"
        "2026-06-01 01:00:00,Germany,Germany,DE,100,150,x\n",
        encoding="utf-8",
    )
    points = CsvTrace.load(export).points("DE", T0, T0 + 2 * HOUR)
    assert [p.intensity_g_per_kwh for p in points] == [350.0, 150.0]  # life cycle

    bad = tmp_path / "bad.csv"
    bad.write_text("when,value\n2026-06-01,1\n")
    with pytest.raises(SourceError, match="needs a datetime column"):
        CsvTrace.load(bad)


def test_a_fixed_source_gives_the_planner_nothing_to_wait_for() -> None:
    grid = FixedSource(250.0, 70.0)
    points = grid.points("XX", T0, T0 + 5 * HOUR)
    plan = plan_start(T0, T0 + 5 * HOUR, ExpectedRun(3600.0, KWH, "x"), points)
    assert plan.delay_s == 0 and points[0].provenance == "fixed"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("carbon_zone", "", "carbon_zone='' is invalid: expected None (no carbon accounting) or"),
        ("carbon_source", "watttime", "expected one of electricitymaps, fixed:"),
        ("carbon_source", "fixed:-3", "expected one of electricitymaps"),
        ("carbon_objective", "cheapest", "expected one of emissions, cost, mix"),
        ("carbon_weight", 1.5, "carbon_weight=1.5 is invalid: expected a number in [0, 1]"),
        ("carbon_fallback_g_per_kwh", -1, "gCO2e/kWh in [0, 2000]"),
        ("carbon_fallback_g_per_kwh", 1e9, "gCO2e/kWh in [0, 2000]"),
        (
            "carbon_source",
            "fixed:1e9",
            "carbon intensity 1000000000.0 is not a finite number in [0, 2000] gCO2e/kWh",
        ),
        (
            "carbon_source",
            "fixed:300:1e7",
            "price 10000000.0 is not a finite number in [-1000, 20000] per MWh",
        ),
        ("carbon_source", "fixed:nan", "carbon intensity nan is not a finite number"),
        (
            "start_deadline",
            "tomorrow",
            "start_deadline='tomorrow' is invalid: expected None, a timedelta",
        ),
        ("start_deadline", -5, "start_deadline=-5 is invalid"),
        ("start_deadline", datetime(2026, 1, 1), "timezone-aware"),
        (
            "expected_duration",
            "2 weeks",
            "expected_duration='2 weeks' is invalid: expected a timedelta, seconds",
        ),
    ],
)
def test_bad_carbon_parameters_name_themselves_and_the_allowed_values(
    name: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        PARAMETER_CHECKS[name](value)
    assert message in str(err.value)


def test_good_carbon_parameters_pass_and_resolve() -> None:
    options = CarbonOptions("DE", "fixed:300:80", 475.0, "mix", 0.3, "6h", "90min")
    assert options.deadline(T0) == T0 + 6 * HOUR
    assert options.expected_duration_s == 5400.0
    assert (
        CarbonOptions("DE", start_deadline="2026-06-01T08:00:00+00:00").deadline(T0)
        == T0 + 8 * HOUR
    )
    assert CarbonOptions("DE", start_deadline=timedelta(minutes=30)).deadline(T0) == T0 + HOUR / 2
    assert isinstance(options.grid_source(lambda: FixedSource(0.0)), FixedSource)


def test_a_recurrence_sums_its_tries_each_over_its_own_span() -> None:
    from zeus_airflow.core.carbon.accounting import Fallback
    from zeus_airflow.core.carbon.recurrence import TrySpan, account

    grid = CsvTrace("mem", {"DE": tuple(hourly([100, 300], prices=[10.0, 30.0]))})
    tries = [TrySpan(1, KWH, T0, T0 + HOUR), TrySpan(2, 3 * KWH, T0 + HOUR, T0 + 2 * HOUR)]
    plan = plan_start(T0, T0 + 3 * HOUR, ExpectedRun(600.0, KWH, "x"), hourly([500, 100, 900]))
    run, per_try = account(grid, "DE", tries, None, plan)
    assert per_try[1].emissions_g == pytest.approx(100.0)
    assert per_try[2].emissions_g == pytest.approx(900.0)
    assert run.emissions_g == pytest.approx(1000.0)
    assert run.carbon_intensity_g_per_kwh == pytest.approx(250.0)  # 1000 g over 4 kWh
    assert run.energy_cost == pytest.approx(0.001 * 10 + 0.003 * 30)
    assert run.start_delay_s == plan.delay_s == per_try[2].start_delay_s
    # A source that cannot be built (no Connection): the fallback, with the reason.
    broken, _ = account(
        SourceError("no such Airflow connection"), "DE", tries, Fallback(400.0), None
    )
    assert (broken.carbon_provenance, broken.emissions_g) == ("fallback", pytest.approx(1600.0))
    assert "no such Airflow connection" in broken.carbon_note
    nothing, none = account(SourceError("down"), "DE", tries, None, None)
    assert nothing.emissions_g is None and none == {} and nothing.carbon_note == "down"


def test_an_expected_run_of_0_s_is_no_expectation_and_the_plan_says_so() -> None:
    """Issue 37: "expected run: 0 s" is not an expectation; the plan weighs the intensity
    at the start alone, and its reason says that instead."""
    instant = ExpectedRun(0.2, KWH, "mean of the job's last 1 run(s) at any batch size")
    assert instant.instant and not ExpectedRun(1.0, KWH, "x").instant
    plan = plan_start(T0, T0 + 3 * HOUR, instant, hourly([900, 100, 900]))
    assert plan.start_at == T0 + HOUR
    assert "0 s" not in plan.reason
    assert "no expected run yet (mean of the job's last 1 run(s) at any batch size): " in (
        plan.reason
    )
    assert "planning on the intensity alone" in plan.reason
