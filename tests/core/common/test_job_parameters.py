"""A job's parameters are declared once: JobConfig and ProfilerConfig's fields.

Everything else that names them (the operator's signature, the simulator's and drift runs'
specs, the Capriccio job, the operator's checks) takes them from ``config.JOB_PARAMETERS``,
which is derived from those two dataclasses.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from zeus_airflow.capriccio.job import CAPRICCIO_PARAMETERS, CapriccioJob
from zeus_airflow.core.common.config import (
    JOB_PARAMETERS,
    REQUIRED_JOB_PARAMETERS,
    ConfigError,
    JobConfig,
    ProfilerConfig,
    config_from_parameters,
)
from zeus_airflow.sim.drift import DriftSpec
from zeus_airflow.sim.simulator import SimulationSpec

# A valid value for every parameter, none of them its default: each must reach its field.
CHANGED = {
    "batch_sizes": (8, 16, 32),
    "default_batch_size": 16,
    "target_metric": 0.7,
    "max_epochs": 3,
    "higher_is_better": False,
    "eta": 0.25,
    "beta": 3.0,
    "window_size": 7,
    "drift_detection": False,
    "max_tries": 2,
    "exploration_budget": None,
    "payback_horizon": 28,
    "cost_includes_cpu": True,
    "warmup_steps": 1,
    "profile_steps": 9,
    "power_limit_mode": "observe",
    "power_limit_selector": "min-energy",
    "max_slowdown": 1.5,
    "warmup_s": 0.5,
    "profile_s": 0.75,
}


def test_the_declaration_is_jobconfig_and_profilerconfig_fields() -> None:
    declared = [f for f in dataclasses.fields(JobConfig) if f.name not in ("job_id", "profiler")]
    declared += dataclasses.fields(ProfilerConfig)
    assert list(JOB_PARAMETERS.values()) == declared
    assert set(JOB_PARAMETERS) == set(CHANGED)
    assert REQUIRED_JOB_PARAMETERS == (
        "batch_sizes",
        "default_batch_size",
        "target_metric",
        "max_epochs",
    )


def test_every_parameter_reaches_its_field_by_its_users_name() -> None:
    config = config_from_parameters("job", CHANGED)
    for name, declared in JOB_PARAMETERS.items():
        holder = config.profiler if declared in dataclasses.fields(ProfilerConfig) else config
        assert getattr(holder, declared.name) == CHANGED[name], name


def test_a_name_that_is_no_job_parameter_is_refused() -> None:
    with pytest.raises(ConfigError, match="window=10 is invalid: it is not a job parameter"):
        config_from_parameters("job", {**CHANGED, "window": 10})


def test_the_operators_job_keywords_are_the_declaration_one_to_one() -> None:
    """The operator keeps typed keyword parameters (mypy checks a DAG's call against them,
    and Airflow's ``default_args`` and ``expand()`` read them); they are the declaration's
    names, with its defaults and the same required ones."""
    from zeus_airflow import ZeusTrainOperator

    signature = inspect.signature(ZeusTrainOperator.__init__).parameters
    own = {n: p for n, p in signature.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(JOB_PARAMETERS) <= set(own)
    for name, declared in JOB_PARAMETERS.items():
        default = own[name].default
        if declared.default is dataclasses.MISSING:
            assert default is inspect.Parameter.empty, name
        else:
            assert default == declared.default and type(default) is type(declared.default), name
    declared_fields = {f.name for f in dataclasses.fields(JobConfig)}
    declared_fields |= {f.name for f in dataclasses.fields(ProfilerConfig)}
    others = set(own) - set(JOB_PARAMETERS) - {"job_id"}  # job_id: None names the task's
    assert not others & declared_fields


@pytest.mark.parametrize("spec", [SimulationSpec, DriftSpec, CapriccioJob])
def test_no_other_spec_declares_a_job_parameter(spec: type) -> None:
    """They hold job parameters by name (a ``job`` or ``changes`` mapping), checked when the
    JobConfig is built; none declares one as a field of its own."""
    names = {f.name for f in dataclasses.fields(spec)}
    assert not names & set(JOB_PARAMETERS)
    assert not names & {"window", "mode", "selector"}  # the old spellings


def test_the_capriccio_job_names_only_job_parameters() -> None:
    assert set(CAPRICCIO_PARAMETERS) <= set(JOB_PARAMETERS)
    config = CapriccioJob().job_config("capriccio")
    assert config.window_size == 10 and config.beta == 3.0
    assert config.profiler.profile_steps == 8 and config.profiler.profile_s == 0.0


# --- issue 49: a parameter's check is declared with it -----------------------------------------
def test_every_parameter_declares_its_check_in_its_field() -> None:
    """The check lives in the field's metadata (``config.parameter``), as figures declare
    theirs: a new parameter is its declaration plus its operator keyword, and no table of
    checks is edited beside it."""
    from zeus_airflow.core.common.config import PARAMETER_CHECKS

    declared = [
        f
        for config in (JobConfig, ProfilerConfig)
        for f in dataclasses.fields(config)
        if f.name != "profiler"
    ]
    assert all("check" in f.metadata for f in declared), [
        f.name for f in declared if "check" not in f.metadata
    ]
    assert set(JOB_PARAMETERS) <= set(PARAMETER_CHECKS)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("payback_horizon", 0, r"payback_horizon=0 is invalid: expected an integer number of runs"),
        ("exploration_budget", -0.1, r"exploration_budget=-0.1 is invalid"),
        ("power_limit_mode", "fast", r"power_limit_mode='fast' is invalid: expected one of"),
    ],
)
def test_the_declared_check_answers_everywhere_alike(
    name: str, value: object, message: str
) -> None:
    """The same declaration checks the operator's keyword, JobConfig and ProfilerConfig."""
    from zeus_airflow.core.common.config import PARAMETER_CHECKS

    with pytest.raises(ConfigError, match=message):
        PARAMETER_CHECKS[name](value)
    with pytest.raises(ConfigError, match=message):
        config_from_parameters("job", {**CHANGED, name: value})
