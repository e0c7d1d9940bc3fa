"""The Electricity Maps client against a local server speaking the API's v3 format: figures
and their provenance, the token header, the cache, and every failure ending in a fallback
whose provenance and note say what happened."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from fixtures_grid import FakeElectricityMaps, Reply, em_forecast, em_history, em_item

from zeus_airflow.core.carbon.accounting import Fallback, run_emissions
from zeus_airflow.core.carbon.electricitymaps import ElectricityMapsClient
from zeus_airflow.core.carbon.signal import SourceError

NOW = datetime(2026, 11, 24, 8, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)
KWH = 3.6e6


def client(
    fake: FakeElectricityMaps, **options: object
) -> tuple[ElectricityMapsClient, list[float]]:
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    settings: dict[str, object] = {
        "timeout_s": 2.0,
        "retries": 2,
        "backoff_s": 0.05,
        "clock": lambda: NOW,
        "sleep": sleep,
        **options,
    }
    return ElectricityMapsClient("secret-token", base_url=fake.url, **settings), slept


def test_latest_history_and_forecast_are_read_with_their_provenance(
    electricity_maps: FakeElectricityMaps,
) -> None:
    hour = NOW.replace(minute=0)
    electricity_maps.script(
        Reply(body=em_item(hour, 321)),
        Reply(body=em_history(hour - 3 * HOUR, [400, 380, 350])),
        Reply(body=em_forecast(hour + HOUR, [200, 150])),
    )
    em, _ = client(electricity_maps)

    latest = em.latest("DE")
    history = em.history("DE")
    forecast = em.forecast("DE")

    assert (latest.start, latest.end, latest.intensity_g_per_kwh, latest.provenance) == (
        hour,
        hour + HOUR,
        321.0,
        "live",
    )
    assert [(p.start, p.intensity_g_per_kwh, p.provenance) for p in history] == [
        (hour - 3 * HOUR, 400.0, "live"),
        (hour - 2 * HOUR, 380.0, "live"),
        (hour - HOUR, 350.0, "live"),
    ]
    assert [(p.start, p.intensity_g_per_kwh, p.provenance) for p in forecast] == [
        (hour + HOUR, 200.0, "forecast"),
        (hour + 2 * HOUR, 150.0, "forecast"),
    ]
    paths = [path for path, _ in electricity_maps.requests]
    assert paths == [
        "/v3/carbon-intensity/latest?zone=DE",
        "/v3/carbon-intensity/history?zone=DE",
        "/v3/carbon-intensity/forecast?zone=DE",
    ]
    assert {headers["auth-token"] for _, headers in electricity_maps.requests} == {"secret-token"}


def test_answers_are_cached_per_url(electricity_maps: FakeElectricityMaps) -> None:
    electricity_maps.script(Reply(body=em_item(NOW, 100)), Reply(body=em_item(NOW, 999)))
    em, _ = client(electricity_maps)
    assert em.latest("DE").intensity_g_per_kwh == 100.0
    assert em.latest("DE").intensity_g_per_kwh == 100.0  # not asked again
    assert len(electricity_maps.requests) == 1
    expired, _ = client(electricity_maps, cache_ttl_s=0.0)
    assert expired.latest("DE").intensity_g_per_kwh == 999.0


def test_a_run_spanning_past_and_future_uses_history_then_forecast(
    electricity_maps: FakeElectricityMaps,
) -> None:
    hour = NOW.replace(minute=0)
    electricity_maps.script(
        Reply(body=em_history(hour - HOUR, [300])),
        Reply(body=em_item(hour, 200)),
        Reply(body=em_forecast(hour, [999, 100])),
    )
    em, _ = client(electricity_maps)
    # 30 min in the last hour (300), 60 min this hour (latest 200 beats the forecast's 999),
    # 30 min of next hour (forecast 100): mean 200 g/kWh.
    found = run_emissions(em, "DE", 2 * KWH, hour - HOUR / 2, hour + 3 * HOUR / 2, None)
    assert found.intensity_g_per_kwh == pytest.approx(200.0)
    assert found.emissions_g == pytest.approx(400.0)
    assert found.provenance == "forecast"  # the least direct figure it used


def test_401_is_not_retried_and_falls_back_saying_so(electricity_maps: FakeElectricityMaps) -> None:
    electricity_maps.script(Reply(401, {"error": "Invalid token"}))
    em, slept = client(electricity_maps)
    with pytest.raises(SourceError, match="refused the token"):
        em.latest("DE")
    assert len(electricity_maps.requests) == 1 and slept == []

    electricity_maps.script(Reply(401, {"error": "Invalid token"}))
    found = run_emissions(em, "DE", KWH, NOW - HOUR, NOW - HOUR / 2, Fallback(475.0))
    assert (found.provenance, found.intensity_g_per_kwh, found.emissions_g) == (
        "fallback",
        475.0,
        pytest.approx(475.0),
    )
    assert "HTTP 401" in found.note


def test_429_backs_off_then_succeeds(electricity_maps: FakeElectricityMaps) -> None:
    electricity_maps.script(
        Reply(429, {"error": "rate limited"}),
        Reply(429, {"error": "rate limited"}, {"Retry-After": "0.2"}),
        Reply(body=em_item(NOW, 123)),
    )
    em, slept = client(electricity_maps)
    assert em.latest("DE").intensity_g_per_kwh == 123.0
    assert len(electricity_maps.requests) == 3
    assert slept == [0.05, 0.2]  # our backoff, then the server's Retry-After


def test_429_every_time_gives_up_after_its_retries(electricity_maps: FakeElectricityMaps) -> None:
    electricity_maps.script(*[Reply(429, {"error": "rate limited"})] * 3)
    em, slept = client(electricity_maps)
    with pytest.raises(SourceError, match="HTTP 429, 3 tries"):
        em.forecast("DE")
    assert slept == [0.05, 0.1]  # doubling


def test_a_timeout_is_retried_then_falls_back(electricity_maps: FakeElectricityMaps) -> None:
    electricity_maps.script(*[Reply(body=em_item(NOW, 1), delay_s=1.0)] * 2)
    em, slept = client(electricity_maps, timeout_s=0.2, retries=1)
    started = time.monotonic()
    found = run_emissions(em, "DE", KWH, NOW - 2 * HOUR, NOW - HOUR, Fallback(500.0))
    assert time.monotonic() - started < 5
    assert found.provenance == "fallback" and found.emissions_g == pytest.approx(500.0)
    assert "no answer within 0.2 s" in found.note and "2 tries" in found.note
    assert slept == [0.05]


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        json.dumps({"zone": "DE"}).encode(),
        json.dumps(
            {
                "zone": "DE",
                "history": [{"datetime": "2026-11-24T07:00:00Z", "carbonIntensity": "high"}],
            }
        ).encode(),
        json.dumps({"zone": "DE", "history": [{"carbonIntensity": 10}]}).encode(),
    ],
    ids=["not-json", "no-history", "not-a-number", "no-datetime"],
)
def test_a_malformed_body_falls_back_with_the_reason(
    electricity_maps: FakeElectricityMaps, body: bytes
) -> None:
    electricity_maps.script(Reply(body=body), Reply(body=em_item(NOW, 1)))
    em, slept = client(electricity_maps)
    found = run_emissions(em, "DE", KWH, NOW - 2 * HOUR, NOW - HOUR, Fallback(475.0))
    assert found.provenance == "fallback" and found.intensity_g_per_kwh == 475.0
    assert "Electricity Maps sent" in found.note
    assert slept == []  # a malformed answer is not retried


def test_without_a_fallback_a_failure_is_an_error(electricity_maps: FakeElectricityMaps) -> None:
    electricity_maps.script(Reply(body=b"nonsense"))
    em, _ = client(electricity_maps)
    with pytest.raises(SourceError, match="not JSON"):
        run_emissions(em, "DE", KWH, NOW - 2 * HOUR, NOW - HOUR, None)


def test_a_gap_in_the_answer_is_filled_with_the_fallback(
    electricity_maps: FakeElectricityMaps,
) -> None:
    hour = NOW.replace(minute=0)
    electricity_maps.script(
        Reply(body=em_history(hour - 2 * HOUR, [100])), Reply(body=em_item(hour - 2 * HOUR, 100))
    )
    em, _ = client(electricity_maps)
    found = run_emissions(em, "DE", 2 * KWH, hour - 2 * HOUR, hour, Fallback(300.0))
    assert found.intensity_g_per_kwh == pytest.approx(200.0)  # one hour each
    assert found.provenance == "fallback"
    assert "no figure for this part" in found.note


def test_the_hook_reads_the_token_and_address_from_a_connection(
    electricity_maps: FakeElectricityMaps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zeus_airflow.hooks.carbon import ElectricityMapsHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_EM_TEST",
        json.dumps(
            {
                "conn_type": "electricitymaps",
                "password": "from-the-connection",
                "extra": {"base_url": electricity_maps.url, "retries": 0, "cache_ttl_s": 0},
            }
        ),
    )
    electricity_maps.script(Reply(body=em_item(NOW, 42)), Reply(429, {}))
    em = ElectricityMapsHook("em_test").get_conn()
    assert em.latest("DE").intensity_g_per_kwh == 42.0
    assert electricity_maps.requests[0][1]["auth-token"] == "from-the-connection"
    with pytest.raises(SourceError, match="1 tries"):  # retries=0 from the extra
        em.latest("FR")
    with pytest.raises(SourceError, match="no such Airflow connection"):
        ElectricityMapsHook("em_missing").get_conn()


def test_when_the_forecast_fails_the_past_part_still_uses_history(
    electricity_maps: FakeElectricityMaps,
) -> None:
    hour = NOW.replace(minute=0)
    electricity_maps.script(
        Reply(body=em_history(hour - HOUR, [300])),
        Reply(body=em_item(hour, 300)),
        Reply(503, {"error": "down"}),
        Reply(503, {"error": "down"}),
    )
    em, _ = client(electricity_maps, retries=1)
    # This hour from the latest figure (300), the next one without a forecast (fallback 100).
    found = run_emissions(em, "DE", KWH, hour, hour + 2 * HOUR, Fallback(100.0))
    assert found.intensity_g_per_kwh == pytest.approx(200.0)
    assert found.provenance == "fallback"
    assert "no figure for this part of the span" in found.note
