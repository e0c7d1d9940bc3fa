"""Invalid job parameters fail with an error naming the parameter and what is allowed."""

from __future__ import annotations

import json

import pytest

from zeus_airflow.core.common.config import ConfigError, JobConfig, ProfilerConfig

GOOD = dict(
    job_id="j", batch_sizes=(8, 16, 32), default_batch_size=16, target_metric=0.8, max_epochs=10
)


@pytest.mark.parametrize(
    ("override", "parameter", "allowed"),
    [
        ({"batch_sizes": ()}, "batch_sizes", "non-empty"),
        ({"batch_sizes": (32, 16, 8)}, "batch_sizes", "strictly increasing"),
        ({"batch_sizes": (8, 8, 16)}, "batch_sizes", "strictly increasing"),
        ({"batch_sizes": (0, 16)}, "batch_sizes", "integers > 0"),
        ({"default_batch_size": 64}, "default_batch_size", "one of batch_sizes"),
        ({"eta": -0.1}, "eta", "[0, 1]"),
        ({"eta": 1.5}, "eta", "[0, 1]"),
        ({"beta": 1.0}, "beta", "> 1"),
        ({"beta": 0.5}, "beta", "> 1"),
        ({"window_size": -1}, "window_size", ">= 1"),
        ({"window_size": 0}, "window_size", ">= 1"),
        ({"max_epochs": 0}, "max_epochs", ">= 1"),
        ({"target_metric": float("nan")}, "target_metric", "finite"),
        ({"job_id": ""}, "job_id", "non-empty"),
        ({"max_tries": 0}, "max_tries", ">= 1"),
    ],
)
def test_invalid_job_parameter_is_named(
    override: dict[str, object], parameter: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        JobConfig(**{**GOOD, **override})  # type: ignore[arg-type]
    assert str(err.value).startswith(f"{parameter}=")
    assert allowed in str(err.value)


@pytest.mark.parametrize(
    ("override", "parameter"),
    [
        ({"mode": "turbo"}, "power_limit_mode"),
        ({"selector": "fastest"}, "power_limit_selector"),
        ({"profile_steps": 0}, "profile_steps"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"max_slowdown": 0.9}, "max_slowdown"),
        ({"warmup_s": -1.0}, "warmup_s"),
        ({"warmup_s": float("nan")}, "warmup_s"),
        ({"profile_s": float("inf")}, "profile_s"),
        ({"profile_s": True}, "profile_s"),
        ({"profile_s": "3"}, "profile_s"),
    ],
)
def test_invalid_profiler_parameter_is_named(override: dict[str, object], parameter: str) -> None:
    with pytest.raises(ConfigError, match=f"^{parameter}="):
        ProfilerConfig(**override)  # type: ignore[arg-type]


def test_config_round_trips_through_json_and_fingerprint_tracks_meaning() -> None:
    config = JobConfig(**GOOD, window_size=10)  # type: ignore[arg-type]
    assert JobConfig.from_json(config.to_json()) == config
    same_meaning = JobConfig(**GOOD, window_size=10, max_tries=1)  # type: ignore[arg-type]
    assert same_meaning.fingerprint() == config.fingerprint()
    other = JobConfig(**{**GOOD, "eta": 0.3}, window_size=10)  # type: ignore[arg-type]
    assert other.fingerprint() != config.fingerprint()


def test_the_profiler_windows_do_not_change_the_version() -> None:
    """Steps and seconds per profiled limit change how a profile is measured, not what a cost
    means; configs stored before the seconds existed still load, with the defaults."""
    config = JobConfig(**GOOD)  # type: ignore[arg-type]
    windows = ProfilerConfig(warmup_steps=10, profile_steps=40, warmup_s=0.0, profile_s=7.5)
    other = JobConfig(**GOOD, profiler=windows)  # type: ignore[arg-type]
    assert other.fingerprint() == config.fingerprint()
    stored = json.loads(config.to_json())
    del stored["profiler"]["warmup_s"], stored["profiler"]["profile_s"]
    old_json = json.dumps(stored)
    assert '"warmup_s"' not in old_json and '"profile_s"' not in old_json
    assert JobConfig.from_json(old_json) == config


def test_direction_of_the_target() -> None:
    higher = JobConfig(**GOOD)  # type: ignore[arg-type]
    lower = JobConfig(**{**GOOD, "higher_is_better": False})  # type: ignore[arg-type]
    assert higher.reached(0.8) and not higher.reached(0.79)
    assert lower.reached(0.79) and not lower.reached(0.81)


def test_cost_includes_cpu_starts_a_new_version_only_when_set() -> None:
    """Jobs created before the option keep their fingerprint (this literal is main's before
    issue 13), so upgrading never splits their history."""
    before = JobConfig("job", (16, 32), 32, target_metric=0.8, max_epochs=5)
    assert before.fingerprint() == "522802d96dc42e36"
    with_cpu = JobConfig(
        "job", (16, 32), 32, target_metric=0.8, max_epochs=5, cost_includes_cpu=True
    )
    assert with_cpu.fingerprint() != before.fingerprint()
    old_json = before.to_json().replace(', "cost_includes_cpu": false', "")
    assert "cost_includes_cpu" not in old_json
    assert JobConfig.from_json(old_json) == before
