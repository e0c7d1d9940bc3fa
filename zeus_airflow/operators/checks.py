"""The operator's parse-time checks: its constructor's, ``partial()``'s and ``expand()``'s.

Airflow's mapped operators call ``__init__`` only when a mapped instance runs, so without
these a bad argument given to ``partial()`` or ``expand()`` would pass parsing and fail every
mapped instance at run time. Each parameter is checked on its own (a template or an XCom is
checked once rendered), then, once every job field is known, the whole job configuration.
Nothing here touches the store, NVML or torch.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import os
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from zeus_airflow.airflow_compat import OperatorPartial, ResolveMixin
from zeus_airflow.core.common.config import (
    DEFAULT_CARBON_SOURCE,
    JOB_PARAMETERS,
    PARAMETER_CHECKS,
    REQUIRED_JOB_PARAMETERS,
    ConfigError,
    JobConfig,
    check_bool,
    check_carbon_source,
    check_job_id,
    check_kwargs,
    check_number,
    config_from_parameters,
    is_blank,
    plain_numbers,
)
from zeus_airflow.core.common.naming import default_job_id
from zeus_airflow.core.devices.spec import parse_device
from zeus_airflow.integrations.mlflow import BUDGET_RANGE_S

if TYPE_CHECKING:
    from zeus_airflow.core.carbon.options import CarbonOptions

PLACEHOLDER_JOB_ID = "templated-job-id"
"""Stands for a templated job_id in the checks across parameters (rendered only at run time)."""
_MAX_EXPANSIONS_CHECKED = 256
"""expand() of literal lists checks each combination as a whole job up to this many."""


def _check_train(value: object) -> None:
    if not callable(value):
        raise ConfigError(f"train={value!r} is invalid: expected a function taking a TrainingRun")
    kind = not_a_plain_function(value)
    if kind is not None:
        name = getattr(value, "__name__", repr(value))
        raise ConfigError(
            f"train={name!r} is invalid: it is {kind}, so calling it trains nothing "
            "(its body runs only when iterated or awaited); expected a plain function "
            "(def train(run): ...) that iterates run.epochs() itself"
        )


def check_returned_keys(train: Callable[..., Any], multiple_outputs: bool) -> None:
    """With ``multiple_outputs``, a return annotation that declares its keys (a TypedDict)
    and names one of Zeus's XComs makes the collision certain: refused at parse time (at run
    time an undeclared one is pushed under ``return_value`` only, with a warning)."""
    if not multiple_outputs:
        return
    from zeus_airflow.operators.xcoms import ZEUS_XCOM_KEYS

    returned = _return_annotation(train)
    if returned is None or not typing.is_typeddict(returned):
        return
    taken = sorted(set(typing.get_type_hints(returned)) & ZEUS_XCOM_KEYS)
    if taken:
        name = getattr(train, "__name__", repr(train))
        raise ConfigError(
            f"train={name!r} is invalid with multiple_outputs=True: its return type "
            f"{returned.__name__} declares the key(s) {taken}, which Zeus pushes as XComs "
            "of its own (each run's figures, its outbox); rename those keys, or set "
            "multiple_outputs=False to get the dict under return_value"
        )


def _return_annotation(train: Callable[..., Any]) -> Any:
    """The return type ``train`` declares, resolved; None when it declares none, or one
    that cannot be resolved here (a name imported only for type checking)."""
    target = train.func if isinstance(train, functools.partial) else train
    try:
        return typing.get_type_hints(target).get("return")
    except Exception:  # NameError, TypeError: nothing can be told at parse time
        return None


def not_a_plain_function(train: object) -> str | None:
    """What ``train`` is when calling it runs none of its body: "a generator function (def
    with yield)", "an async function (async def)"...; None for a plain callable (a
    ``functools.partial`` is looked through)."""
    target = train.func if isinstance(train, functools.partial) else train
    call = target if inspect.isroutine(target) else getattr(target, "__call__", target)  # noqa: B004
    if inspect.isasyncgenfunction(call):
        return "an async generator function (async def with yield)"
    if inspect.iscoroutinefunction(call):
        return "an async function (async def)"
    if inspect.isgeneratorfunction(call):
        return "a generator function (def with yield)"
    return None


def _check_conn_id(value: object, name: str = "zeus_conn_id") -> None:
    if is_blank(value):
        raise ConfigError(
            f"{name}={value!r} is invalid: expected the id of an Airflow "
            "connection (a non-empty string without NUL bytes)"
        )


def _check_traces_dir(value: object) -> None:
    # '' (a template rendering to nothing) is missing, not "the default traces"
    if value is not None and (
        not isinstance(value, str | os.PathLike) or (isinstance(value, str) and is_blank(value))
    ):
        raise ConfigError(
            f"traces_dir={value!r} is invalid: expected None ($ZEUS_TRACES_DIR or "
            "the packaged traces) or the path of the traces folder (not empty)"
        )


def check_carbon(values: Mapping[str, Any]) -> None:
    """A carbon-aware start needs a zone to read the forecast of."""
    if values.get("start_deadline") is not None and values.get("carbon_zone") is None:
        raise ConfigError(
            f"start_deadline={values['start_deadline']!r} is invalid without "
            "carbon_zone: expected carbon_zone set to a grid zone (e.g. 'DE'), "
            "or start_deadline=None"
        )


def _check_mlflow_experiment(value: object) -> None:
    if value is not None and is_blank(value):
        raise ConfigError(
            f"mlflow_experiment={value!r} is invalid: expected None (no run of its own: "
            "the MLflow run the train function runs in, if any) or the name of an MLflow "
            "experiment (a non-empty string without NUL bytes)"
        )


def _check_mlflow_budget_s(value: object) -> float:
    low, high = BUDGET_RANGE_S
    return check_number(
        "mlflow_budget_s",
        value,
        f"a number of seconds in [{low:g}, {high:g}] (all of a task's requests to MLflow)",
        lambda v: low <= v <= high,
    )


def _check_optional_job_id(value: object) -> None:
    if value is not None:  # None: the default, checked once dag_id and task_id are known
        check_job_id(value)


OPERATOR_CHECKS: dict[str, Callable[[Any], object]] = {
    **PARAMETER_CHECKS,
    "job_id": _check_optional_job_id,
    "train": _check_train,
    "device": parse_device,
    "train_kwargs": lambda v: check_kwargs("train_kwargs", v),
    "zeus_conn_id": _check_conn_id,
    "carbon_conn_id": lambda v: _check_conn_id(v, "carbon_conn_id"),
    "traces_dir": _check_traces_dir,
    "fail_on_missed_target": lambda v: check_bool("fail_on_missed_target", v),
    "fail_when_infeasible": lambda v: check_bool("fail_when_infeasible", v),
    "shared_job": lambda v: check_bool("shared_job", v),
    "mlflow_experiment": _check_mlflow_experiment,
    "mlflow_budget_s": _check_mlflow_budget_s,
    # None: not used without carbon_zone, Electricity Maps with one (``carbon_source_of``).
    "carbon_source": lambda v: None if v is None else check_carbon_source(v),
}
"""A check for each of the operator's own parameters (Airflow checks BaseOperator's)."""

TEMPLATED_STRINGS = (
    "job_id",
    "device",
    "zeus_conn_id",
    "traces_dir",
    "carbon_zone",
    "carbon_source",
    "carbon_conn_id",
    "start_deadline",
    "mlflow_experiment",
)
"""Templated parameters whose value is one string: a template there is rendered at run time.
(``train_kwargs`` is templated too, but its values are: it must be a mapping already.)"""


def is_template_value(value: object) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _unknown_yet(name: str, value: object) -> bool:
    """Whether a value is only known at run time: an XCom or mapped argument, or a template
    in a templated string."""
    return isinstance(value, ResolveMixin) or (
        name in TEMPLATED_STRINGS and is_template_value(value)
    )


def check_arguments(given: Mapping[str, Any]) -> None:
    """Check each of the operator's parameters in ``given`` on its own; others are skipped."""
    for name, value in given.items():
        check = OPERATOR_CHECKS.get(name)
        if check is not None and not _unknown_yet(name, value):
            check(value)
    if "train" not in given or "train_kwargs" not in given:
        return  # partial(): the other may come from expand(), checked when an instance runs
    train, train_kwargs = given["train"], given["train_kwargs"]
    if not isinstance(train, ResolveMixin) and not isinstance(train_kwargs, ResolveMixin):
        _check_call(train, check_kwargs("train_kwargs", train_kwargs))


def _check_call(train: Callable[..., Any], train_kwargs: Mapping[str, Any]) -> None:
    """``train(run, **train_kwargs)`` must bind: a keyword train does not take (or one that
    is also its TrainingRun parameter) would fail every run with a bare TypeError."""
    try:
        signature = inspect.signature(train)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check
        return
    try:
        signature.bind(None, **train_kwargs)
    except TypeError as err:
        name = getattr(train, "__name__", repr(train))
        raise ConfigError(
            f"train_kwargs={dict(train_kwargs)!r} is invalid: {name}(run, "
            f"**train_kwargs) cannot be called ({err}); expected keyword "
            "arguments that the train function takes besides its TrainingRun"
        ) from None


_Init = TypeVar("_Init", bound=Callable[..., None])


def keeps_own_arguments(init: _Init) -> _Init:
    """An operator's ``__init__`` that first keeps its own arguments (its keyword-only
    parameters, defaults applied) as the operator's attributes of the same names, for its
    body to check: the call bound to the signature, as Airflow binds ``default_args``."""
    signature = inspect.signature(init)
    own = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]

    @functools.wraps(init)
    def keeping(self: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, **kwargs)
        bound.apply_defaults()
        for name in own:
            setattr(self, name, bound.arguments[name])
        init(self, **kwargs)

    return cast(_Init, keeping)  # the same signature: mypy checks a DAG's call against it


@functools.cache
def _defaults(operator_class: type) -> dict[str, Any]:
    """The defaults of the operator's own parameters, from its constructors."""
    found: dict[str, Any] = {}
    for klass in reversed(operator_class.__mro__):
        init = vars(klass).get("__init__")
        try:
            parameters = inspect.signature(init).parameters if init else {}
        except (TypeError, ValueError):  # a C constructor
            continue
        found |= {
            name: p.default
            for name, p in parameters.items()
            if name in OPERATOR_CHECKS and p.default is not inspect.Parameter.empty
        }
    return found


def check_job(operator_class: type, given: Mapping[str, Any]) -> None:
    """The checks across parameters, once every required job field is known."""
    if not all(name in given for name in REQUIRED_JOB_PARAMETERS):
        return
    values = {**_defaults(operator_class), **given}
    if any(isinstance(values[name], ResolveMixin) for name in OPERATOR_CHECKS if name in values):
        return  # an XCom stands for one of them
    job_id = values["job_id"]
    if job_id is None or is_template_value(job_id):
        # A mapped instance's default id depends on its map index: checked when it runs.
        job_id = PLACEHOLDER_JOB_ID
    job_config(values, job_id)


def check_operator(values: Mapping[str, Any], dag_id: str, task_id: str) -> None:
    """The constructor's checks: each parameter, then the job they configure. ``values``:
    the operator's attributes (templates unrendered)."""
    check_arguments({name: values[name] for name in OPERATOR_CHECKS if name in values})
    check_carbon(values)
    job_id = values["job_id"]
    if job_id is not None:
        job_id = PLACEHOLDER_JOB_ID if is_template_value(job_id) else job_id
    else:
        job_id = default_job_id(dag_id, task_id)
        try:
            check_job_id(job_id)
        except ConfigError as err:
            raise ConfigError(
                f"{err}; it is the default (<dag_id>.<task_id>): pass a shorter job_id"
            ) from None
    job_config(values, job_id)  # the checks across parameters (default_batch_size...)


def checked_partial_kwargs(operator_class: type, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``partial()``'s arguments checked one by one and, once every job field is known, as a
    job; numbers kept as Python's."""
    check_arguments(kwargs)
    check_job(operator_class, kwargs)
    return {
        name: plain_numbers(value) if name in OPERATOR_CHECKS else value
        for name, value in kwargs.items()
    }


def _check_expand(
    operator_class: type, partial_kwargs: Mapping[str, Any], mapped: Mapping[str, Any]
) -> None:
    """expand(name=[...]): each literal element on its own, then (when few enough) each
    combination with the partial() arguments as a whole job."""
    literal = {
        name: value
        for name, value in mapped.items()
        if isinstance(value, list | tuple) and name in OPERATOR_CHECKS
    }
    for name, values in literal.items():
        for value in values:
            if not _unknown_yet(name, value):
                OPERATOR_CHECKS[name](value)
    if len(literal) != len(mapped) or not all(literal.values()):
        return  # an XCom (or an empty list) decides at run time
    if math.prod(len(values) for values in literal.values()) > _MAX_EXPANSIONS_CHECKED:
        return
    for combination in itertools.product(*literal.values()):
        given = {**partial_kwargs, **dict(zip(literal, combination, strict=True))}
        check_job(operator_class, given)


def _check_expand_kwargs(
    operator_class: type, partial_kwargs: Mapping[str, Any], kwargs: object
) -> None:
    """expand_kwargs([{...}, ...]): each literal mapping with the partial() arguments."""
    if not isinstance(kwargs, list | tuple):
        return  # an XCom: known at run time
    for item in kwargs:
        if isinstance(item, Mapping):
            check_arguments(item)
            check_job(operator_class, {**partial_kwargs, **item})


class CheckedPartial(OperatorPartial):
    """What ``ZeusTrainOperator.partial()`` returns: ``expand`` and ``expand_kwargs`` check
    the literal values they are given before Airflow maps them."""

    @classmethod
    def of(cls, made: OperatorPartial) -> CheckedPartial:
        checked = cls(operator_class=made.operator_class, kwargs=made.kwargs, params=made.params)
        made._expand_called = True  # replaced by ``checked``: no "never mapped" warning
        return checked

    def expand(self, **mapped_kwargs: Any) -> Any:
        self._expand_called = True  # a refused expand() is reported by its error, not a warning
        _check_expand(self.operator_class, self.kwargs, mapped_kwargs)
        return super().expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> Any:
        self._expand_called = True
        _check_expand_kwargs(self.operator_class, self.kwargs, kwargs)
        return super().expand_kwargs(kwargs, strict=strict)


def job_config(values: Mapping[str, Any], job_id: str) -> JobConfig:
    """The core configuration from the operator's parameters (attributes or arguments)."""
    return config_from_parameters(job_id, {name: values[name] for name in JOB_PARAMETERS})


def carbon_source_of(values: Mapping[str, Any]) -> str | None:
    """The grid source a task reads: None without ``carbon_zone`` (none is used), else the
    one given or ``electricitymaps``."""
    if values["carbon_zone"] is None:
        return None
    given = values["carbon_source"]
    return DEFAULT_CARBON_SOURCE if given is None else given


def carbon_options(values: Mapping[str, Any]) -> CarbonOptions | None:
    """The rendered carbon options (checked again: templates are rendered by now); None
    without ``carbon_zone``."""
    check_carbon(values)
    if values["carbon_zone"] is None:
        return None
    from zeus_airflow.core.carbon.options import CarbonOptions

    return CarbonOptions(
        values["carbon_zone"],
        carbon_source_of(values) or DEFAULT_CARBON_SOURCE,  # a zone: never None
        values["carbon_fallback_g_per_kwh"],
        values["carbon_objective"],
        values["carbon_weight"],
        values["start_deadline"],
        values["expected_duration"],
    )
