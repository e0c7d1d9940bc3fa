"""A job's configuration and its validation: the one place that knows the defaults.

Every entry point (operator, CLI, simulator) builds a :class:`JobConfig`, so a bad value gets
the same error, naming the parameter and the allowed values, wherever it comes from, and
always before any GPU setting is touched.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

PowerLimitMode = Literal["optimize", "observe", "measure"]
"""How the profiler treats GPU power limits.

``optimize``: profile every candidate limit, then train at the optimum.
``observe``: profile, then train at the maximum limit and report what the optimum would save
(the paper's observer mode). ``measure``: never change any GPU setting; measure at whatever
limit the GPU has (for shared GPUs and for processes without the right to set limits).
"""

POWER_LIMIT_MODES: tuple[str, ...] = ("optimize", "observe", "measure")
SELECTORS: tuple[str, ...] = ("zeus", "min-energy", "min-time", "min-energy-within-slowdown")

DEFAULT_ETA = 0.5
DEFAULT_BETA = 2.0
DEFAULT_WARMUP_STEPS = 2
DEFAULT_PROFILE_STEPS = 5
DEFAULT_WARMUP_S = 0.1
DEFAULT_PROFILE_S = 0.15
"""Seconds on the device's clock. Energy comes from NVML's energy counter (mJ, cumulative),
not from the power reading that averages over about 1 s, so a window needs no second to be
exact: 0.15 s keeps ms-sized steps measured over many counter updates (upstream Zeus measured
40 steps, whatever their length), and 0.1 s after a new limit lets the firmware's power cap
take hold. Small enough that runs of well under a second finish a profile within a few runs
(a slice in progress is kept between runs); the step floors keep slow steps measured more
than once. docs/algorithm.md has the figures (bench/profile_steps.md)."""
DEFAULT_MAX_SLOWDOWN = 1.1
DEFAULT_DRIFT_DETECTION = True
DEFAULT_EXPLORATION_BUDGET = 0.1
"""The job's cumulative cost stays within (1 + this) x what the Default configuration (the
default batch size at the maximum power limit) would have cost over the same runs
(core/decide/budget.py)."""
DEFAULT_PAYBACK_HORIZON = 14
"""Runs over which an explored try must be expected to pay back what it costs beyond the best
size's run (core/decide/budget.py, ``payback``): two weeks of daily runs."""
MAX_PAYBACK_HORIZON = 10_000
"""The longest payback horizon accepted: decades of daily runs; a larger one is a typo."""
DRIFT_MEMORY = 100
"""Observations per batch size that drift detection reads (the newest): an arm's posterior
horizon when no change is found. At 100 runs an arm's mean is known to ~1.4 % with the 14 %
prior spread, so the cap costs nothing measurable, and it bounds what a decision reads."""

CARBON_OBJECTIVES: tuple[str, ...] = ("emissions", "cost", "mix")
"""What a carbon-aware start minimises: expected gCO2e, expected energy cost, or a mix."""
CARBON_SOURCE_KINDS: tuple[str, ...] = (
    "electricitymaps",
    "fixed:<gCO2e/kWh>[:<price/MWh>]",
    "csv:<path>",
)
DEFAULT_CARBON_SOURCE = "electricitymaps"
DEFAULT_CARBON_WEIGHT = 0.5
DEFAULT_FALLBACK_G_PER_KWH = 475.0
"""Used when the intensity source fails (provenance ``fallback``): the world's average grid
intensity, about 475 gCO2e/kWh (IEA); set ``carbon_fallback_g_per_kwh`` to your grid's."""
MAX_ZONE_LENGTH = 64
INTENSITY_RANGE_G_PER_KWH = (0.0, 2000.0)
"""Plausible grid carbon intensities, gCO2e/kWh: no grid emits less than nothing, and the
dirtiest (lignite) stay below about 1,200 life-cycle; a figure outside is a unit error or
garbage, refused wherever an intensity enters (a CSV row, the API, fixed:, the fallback)."""
PRICE_RANGE_PER_MWH = (-1000.0, 20000.0)
"""Plausible wholesale electricity prices per MWh (any currency): markets clear below zero
(EU's floor -500 EUR, Australia's -1,000 AUD) and spike to their caps (EU 4,000 EUR,
Australia 17,500 AUD)."""


def grid_value_problem(intensity_g_per_kwh: object, price_per_mwh: object = None) -> str | None:
    """Why an intensity (and a price, None: none) cannot be used; None when both can."""
    for name, value, (low, high), unit in (
        ("carbon intensity", intensity_g_per_kwh, INTENSITY_RANGE_G_PER_KWH, "gCO2e/kWh"),
        ("price", price_per_mwh, PRICE_RANGE_PER_MWH, "per MWh"),
    ):
        if value is None and name == "price":
            continue
        number = finite_number(value)
        if number is None or not low <= number <= high:
            return (
                f"{name} {value!r} is not a finite number in [{low:g}, {high:g}] {unit} "
                '(docs/carbon.md, "Plausible values")'
            )
    return None


DB_INT_MAX = 2**31 - 1
"""The largest integer every store backend keeps: PostgreSQL's ``Integer`` columns are 32-bit
signed (SQLite's would take more, so a value that works on SQLite could break on PostgreSQL
only at run time). Every integer parameter that reaches the store is checked against it."""
JOB_ID_MAX_LENGTH = 250
"""Length of the store's ``job_id`` column (``core/store/tables.py`` uses this constant)."""
HOST_MAX_LENGTH = 250
"""Length of the power-limit leases' ``host`` column (``core/store/tables.py``), which holds
``$ZEUS_AIRFLOW_NODE_NAME`` or the host name."""
MAX_HEARTBEAT_S = 3600.0
"""The longest heartbeat interval accepted: a trial's lease is a few missed heartbeats, so a
longer interval would let a dead worker's trial block its batch size for hours."""
MIN_HEARTBEAT_S = 5.0
"""The shortest heartbeat interval accepted. A trial's lease is three intervals, and another
run's decision expires a trial whose lease ran out, discarding what it then trains: below a
few seconds, one beat held up by the store (SQLite's write lock, a slow commit) or a busy
worker lets a live trial expire (at 0.001 s, 1 try in 3 lost its result)."""
MAX_EXPLORATION_BUDGET = 10.0
"""The largest exploration budget accepted: 10 times (1,000 % of) the Default configuration's
cost. Above it the budget constrains nothing any job could spend, so it is a typo (a
percentage, 10 for 10 %, or 1e308), and its arithmetic overflows the figures to infinity."""
MAX_BETA = 100.0
"""The largest early-stop factor accepted: a try 100 times dearer than the best size's mean
is never worth finishing (the paper's beta is 2); larger values overflow the bound."""
MAX_SLOWDOWN = 10.0
"""The largest ``max_slowdown`` accepted: a power limit that makes training 10 times slower
is no energy saving anyone asks for."""
MAX_PROFILE_WINDOW_S = 600.0
"""The longest warm-up or measured window per profiled power limit (seconds, device clock):
a GPU's power settles within a second and its energy counter updates every 0.1 s, so 10
minutes a limit (over an hour for a profile) is a unit error (ms for s)."""


class ConfigError(ValueError):
    """A parameter is out of its allowed range; the message names it."""


Check = Callable[[str, Any], object]
"""A parameter's check: (the name users write, the value) -> the value as kept, or
ConfigError naming the parameter."""


def parameter(check: Check, default: Any = MISSING) -> Any:
    """A job parameter's field, declared with its check (in the field's metadata, as
    ``core/domain/figures.py`` declares figures): JobConfig, ProfilerConfig, the operator and
    ``partial()`` all read the check from here (:data:`PARAMETER_CHECKS`), so a new
    parameter is this one declaration plus its operator keyword."""
    return field(default=default, metadata={"check": check})


@dataclass(frozen=True)
class ProfilerConfig:
    """How the just-in-time power profiler measures each candidate power limit."""

    warmup_steps: int = parameter(lambda n, v: check_int(n, v, minimum=0), DEFAULT_WARMUP_STEPS)
    """At least this many steps run at a newly set limit before measuring (clocks and caches
    settle)."""
    profile_steps: int = parameter(lambda n, v: check_int(n, v, minimum=1), DEFAULT_PROFILE_STEPS)
    """At least this many steps measured per limit."""
    mode: PowerLimitMode = parameter(lambda n, v: check_choice(n, v, POWER_LIMIT_MODES), "optimize")
    """``power_limit_mode``: what the profiler may do to the GPUs' power limits
    (:data:`PowerLimitMode`)."""
    selector: str = parameter(lambda n, v: check_choice(n, v, SELECTORS), "zeus")
    """``power_limit_selector``: which profiled limit is optimal (:data:`SELECTORS`;
    ``core/common/cost.py``)."""
    max_slowdown: float = parameter(
        lambda n, v: check_number(
            n,
            v,
            f"a number in [1, {MAX_SLOWDOWN:g}] (1.1: at most 10 % slower)",
            lambda x: 1.0 <= x <= MAX_SLOWDOWN,
        ),
        DEFAULT_MAX_SLOWDOWN,
    )
    """Only for ``min-energy-within-slowdown``: allowed time per step over the fastest limit."""
    warmup_s: float = parameter(lambda n, v: check_profile_window(n, v), DEFAULT_WARMUP_S)
    """And at least this many seconds (device clock) of warm-up at a newly set limit (not
    after an epoch's end at the same limit: only the steps' floor applies there)."""
    profile_s: float = parameter(lambda n, v: check_profile_window(n, v), DEFAULT_PROFILE_S)
    """And at least this many seconds (device clock) measured per limit."""

    def __post_init__(self) -> None:
        for name, parameter in _PROFILER_PARAMETERS.items():
            # Kept as checked: a numpy or Decimal number becomes Python's int or float.
            object.__setattr__(self, name, _check_of(self, name)(parameter, getattr(self, name)))


_NOT_IN_FINGERPRINT = (
    "job_id",
    "max_tries",
    "drift_detection",
    "exploration_budget",
    "payback_horizon",
)
"""JobConfig's fields that do not change what a cost means (``JobConfig.fingerprint``)."""


@dataclass(frozen=True)
class JobConfig:
    """What a recurring training job optimises, and how.

    Costs are in the paper's units: ``eta * energy_j + (1 - eta) * max_power_w * time_s``.
    """

    job_id: str = parameter(lambda _, v: check_job_id(v))
    """The job's name in the store (at most JOB_ID_MAX_LENGTH characters)."""
    batch_sizes: tuple[int, ...] = parameter(lambda _, v: check_batch_sizes(v))
    """Candidate batch sizes, strictly increasing."""
    default_batch_size: int = parameter(lambda n, v: check_int(n, v, minimum=1))
    """b0, what the job would use without Zeus: one of ``batch_sizes``."""
    target_metric: float = parameter(lambda n, v: check_number(n, v, "a finite number"))
    """The validation metric a try must reach (``run.report_metric``)."""
    max_epochs: int = parameter(lambda n, v: check_int(n, v, minimum=1))
    """Epochs one try may train at most."""
    higher_is_better: bool = parameter(lambda n, v: check_bool(n, v), True)
    """False for losses and error rates."""
    eta: float = parameter(
        lambda n, v: check_number(n, v, "a number in [0, 1]", lambda x: 0.0 <= x <= 1.0),
        DEFAULT_ETA,
    )
    """Weight of energy against time in the cost, in [0, 1]."""
    beta: float = parameter(
        lambda n, v: check_number(
            n,
            v,
            f"a number > 1 and <= {MAX_BETA:g} (the paper's is 2)",
            lambda x: 1 < x <= MAX_BETA,
        ),
        DEFAULT_BETA,
    )
    """Early stop: a try stops once its cost would exceed ``beta`` x the best batch size's mean
    successful cost."""
    window_size: int | None = parameter(
        lambda n, v: check_int(n, v, minimum=1, none="None (no window)"), None
    )
    """Each arm's posterior uses only its N most recent observations (data drift)."""
    drift_detection: bool = parameter(lambda n, v: check_bool(n, v), DEFAULT_DRIFT_DETECTION)
    """Look for a change point in each arm's costs and forget what came before it
    (core/decide/drift.py, docs/drift.md)."""
    max_tries: int | None = parameter(lambda n, v: check_int(n, v, minimum=1, none="None"), None)
    """Tries per recurrence when a batch size fails; None means one per batch size, plus the
    cheapest one run to the end once every surviving size has failed."""
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    exploration_budget: float | None = parameter(
        lambda _, v: check_exploration_budget(v), DEFAULT_EXPLORATION_BUDGET
    )
    """Explore only while the job's cumulative cost stays within ``1 + exploration_budget``
    times the Default configuration's over the same runs (a conservative bandit,
    ``core/decide/budget.py``); None explores as the paper does, without a budget."""
    payback_horizon: int = parameter(lambda _, v: check_payback_horizon(v), DEFAULT_PAYBACK_HORIZON)
    """With an exploration budget: runs over which an explored try must be expected to pay
    back what it costs beyond the best size's run (``core/decide/budget.py``, ``payback``);
    a try that cannot is not made."""
    cost_includes_cpu: bool = parameter(lambda n, v: check_bool(n, v), False)
    """Count the host's CPU package and DRAM energy (RAPL, where measured) in the cost's
    energy term. By default they are reported beside the GPUs' energy, not optimised: the
    batch size and power limit are the GPU's knobs, and RAPL is often unreadable."""

    def __post_init__(self) -> None:
        for name in _JOB_PARAMETERS:
            # Kept as checked: a numpy or Decimal number becomes Python's int or float, so
            # the fingerprint and the stored JSON see the same value whatever type it came as.
            object.__setattr__(self, name, _check_of(self, name)(name, getattr(self, name)))
        _require(
            self.default_batch_size in self.batch_sizes,
            "default_batch_size",
            self.default_batch_size,
            f"one of batch_sizes {list(self.batch_sizes)}",
        )
        _require(
            isinstance(self.profiler, ProfilerConfig), "profiler", self.profiler, "a ProfilerConfig"
        )

    @property
    def tries_per_recurrence(self) -> int:
        return self.max_tries if self.max_tries is not None else len(self.batch_sizes) + 1

    def reached(self, metric: float) -> bool:
        """Whether a validation metric meets the target, in the job's direction."""
        if self.higher_is_better:
            return metric >= self.target_metric
        return metric <= self.target_metric

    def fingerprint(self) -> str:
        """Hash of everything that makes old observations incomparable with new ones.

        A change of fingerprint starts a new job version (see docs/store.md): costs measured
        with another target, eta or batch-size set must not be mixed into the posteriors.
        ``max_tries``, ``drift_detection``, ``exploration_budget``, ``payback_horizon`` and
        the profiler's window sizes (steps and seconds) do not change what a cost means (and a
        job keeps its history when drift detection or the budget is switched).
        """
        relevant = {k: v for k, v in asdict(self).items() if k not in _NOT_IN_FINGERPRINT}
        relevant["profiler"] = {
            "mode": self.profiler.mode,
            "selector": self.profiler.selector,
            "max_slowdown": self.profiler.max_slowdown,
        }
        if not self.cost_includes_cpu:
            # Absent unless set, so that jobs created before the option keep their version.
            del relevant["cost_includes_cpu"]
        return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobConfig:
        data = json.loads(text)
        data["batch_sizes"] = tuple(data["batch_sizes"])
        data["profiler"] = ProfilerConfig(**data["profiler"])
        return cls(**data)


def plain_numbers(value: Any) -> Any:
    """``value`` with any real number that is not Python's (numpy's, Decimal, a 0-d tensor)
    made Python's int or float, in a list or tuple too; anything else as it is. For values
    kept or serialised as given (operator arguments, a store column)."""
    if isinstance(value, list | tuple):
        return [plain_numbers(v) for v in value]
    number = real_number(value)
    return value if number is None or type(value) in (int, float) else number


def _require(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: expected {allowed}")


# --- reusable checks: every entry point (JobConfig, the operator, its partial()) uses these ---
def finite_number(value: object) -> int | float | None:
    """:func:`real_number`, when finite: None for infinities, NaN, and integers too large for a
    float (``10**400``, whose ``math.isfinite`` raises OverflowError)."""
    number = real_number(value)
    if number is None:
        return None
    try:
        return number if math.isfinite(number) else None
    except OverflowError:
        return None


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)``, its middle cut to at most ``limit`` characters (a 400-digit integer,
    a long id), for one-line messages."""
    shown = repr(value)
    if len(shown) <= limit:
        return shown
    half = (limit - 3) // 2
    return f"{shown[:half]}...{shown[-half:]}"


def real_number(value: object) -> int | float | None:
    """Python's int or float for any real number: Python's own, numpy's scalars, Decimal,
    Fraction, a 0-d array or tensor (through ``.item()``); None for anything else (a bool,
    a string, a container, a tensor of several values). Not checked for finiteness."""
    if isinstance(value, bool):  # a bool is an int to Python: True would pass as 1
        return None
    if type(value) in (int, float):
        return value  # type: ignore[return-value]
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real | Decimal):
        try:
            return float(value)
        except ValueError:  # Decimal('sNaN')
            return None
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) in ((), []):
        return real_number(item())  # a 0-d numpy array or torch tensor
    return None


def check_bool(name: str, value: object) -> bool:
    """A real bool: the string "False" is truthy, so anything else is refused, not coerced."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is invalid: expected True or False (a bool)")
    return value


def check_int(name: str, value: object, *, minimum: int, none: str = "") -> int | None:
    """An int (not a bool, not a string) in [minimum, DB_INT_MAX]; None too when ``none``
    says what None means."""
    if value is None and none:
        return None
    number = real_number(value)
    if isinstance(number, int) and minimum <= number <= DB_INT_MAX:
        return number
    allowed = f"an integer >= {minimum} and <= {DB_INT_MAX} (the store's integer columns)"
    raise ConfigError(
        f"{name}={value!r} is invalid: expected {f'{none} or {allowed}' if none else allowed}"
    )


def check_int_below(name: str, value: object, *, minimum: int, bound: str, below: int) -> int:
    """An int in [minimum, below), where ``below`` is the value of the parameter ``bound``
    (a switch recurrence below the recurrences, a validation split below the slice)."""
    number = real_number(value)
    if isinstance(number, int) and minimum <= number < below:
        return number
    raise ConfigError(
        f"{name}={value!r} is invalid: expected an integer in [{minimum}, {bound}={below})"
    )


def check_number(
    name: str, value: object, allowed: str, within: Callable[[float], bool] | None = None
) -> float:
    """A finite real number (not a bool, not a string; numpy's and Decimal too, returned as
    Python's int or float) that also passes ``within``; ``allowed`` says what is accepted,
    in words."""
    number = finite_number(value)
    if number is not None and (within is None or within(number)):
        return number
    raise ConfigError(f"{name}={short_repr(value)} is invalid: expected {allowed}")


def check_batch_sizes(value: object) -> tuple[int, ...]:
    """A non-empty, strictly increasing sequence of integers > 0 that the store can keep."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes) or not value:
        raise ConfigError(
            f"batch_sizes={value!r} is invalid: expected a non-empty list of integers > 0"
        )
    numbers = [real_number(b) for b in value]
    _require(
        all(isinstance(b, int) and 0 < b <= DB_INT_MAX for b in numbers),
        "batch_sizes",
        list(value),
        f"integers > 0 and <= {DB_INT_MAX}",
    )
    sizes = tuple(int(b) for b in numbers if b is not None)
    _require(
        list(sizes) == sorted(set(sizes)),
        "batch_sizes",
        list(sizes),
        "strictly increasing integers (sorted, no duplicates)",
    )
    return sizes


def is_blank(value: object) -> bool:
    """Not a usable name: not a string, empty or white space only, holding a NUL byte
    (PostgreSQL refuses NUL in text, so it would fail every run at the store), or text that
    UTF-8 cannot encode (:func:`unencodable`)."""
    if not isinstance(value, str):
        return True
    return not value.strip() or "\x00" in value or unencodable(value) is not None


def unencodable(value: str) -> str | None:
    """The first character of ``value`` that UTF-8 cannot encode (a lone surrogate such as
    ``'\\ud800'``, left by bytes decoded with ``errors="surrogateescape"``), else None: no
    database, log or XCom can take such text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return value[err.start]
    return None


def check_job_id(value: object) -> str:
    """A non-empty string without NUL bytes that UTF-8 encodes and that fits the store's
    ``job_id`` column."""
    bad = unencodable(value) if isinstance(value, str) else None
    if bad is not None:
        raise ConfigError(
            f"job_id={short_repr(value)} is invalid: it holds {bad!r}, a lone surrogate "
            "that UTF-8 cannot encode (text decoded with errors='surrogateescape'?); "
            "expected a valid Unicode string"
        )
    if is_blank(value):
        raise ConfigError(
            f"job_id={value!r} is invalid: expected a non-empty string without NUL bytes"
        )
    assert isinstance(value, str)
    if len(value) > JOB_ID_MAX_LENGTH:
        # The id itself may be hundreds of characters: show its start only.
        raise ConfigError(
            f"job_id={value[:40] + '...'!r} is invalid: expected at most "
            f"{JOB_ID_MAX_LENGTH} characters (the store's job_id column), "
            f"got {len(value)}"
        )
    return value


def check_node_name(name: str, value: str) -> str:
    """The environment variable ``name`` holds a node's name: text without NUL bytes that
    UTF-8 encodes, fitting the leases' ``host`` column (checked before any GPU setting
    changes: PostgreSQL would refuse it only when the first lease is written)."""
    if is_blank(value) or len(value) > HOST_MAX_LENGTH:
        raise ConfigError(
            f"{name}={short_repr(value)} is invalid: expected the node's name, at most "
            f"{HOST_MAX_LENGTH} characters (the store's lease column; got {len(value)}), "
            "without NUL bytes or lone surrogates: set it to the node's name (Kubernetes: "
            "spec.nodeName through the downward API) or unset it (the host name is used)"
        )
    return value


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{name}={value!r} is invalid: expected one of {', '.join(choices)}")
    return value


def check_heartbeat(value: object) -> float:
    """Seconds between a trial's heartbeats: in [MIN_HEARTBEAT_S, MAX_HEARTBEAT_S]."""
    return check_number(
        "heartbeat_s",
        value,
        f"a number of seconds in [{MIN_HEARTBEAT_S:g}, {MAX_HEARTBEAT_S:g}] (a trial's lease "
        f"is 3 heartbeats; shorter ones let a beat held up by the store expire a live try)",
        lambda x: MIN_HEARTBEAT_S <= x <= MAX_HEARTBEAT_S,
    )


def check_exploration_budget(value: object) -> float | None:
    """None (no budget) or a fraction of Default's cost in [0, MAX_EXPLORATION_BUDGET]."""
    if value is None:
        return None
    return check_number(
        "exploration_budget",
        value,
        f"None (explore without a budget) or a number in [0, {MAX_EXPLORATION_BUDGET:g}]: "
        "a fraction of the Default configuration's cost (0.1 for 10 %; "
        f"{MAX_EXPLORATION_BUDGET:g} is 1,000 %)",
        lambda x: 0 <= x <= MAX_EXPLORATION_BUDGET,
    )


def check_payback_horizon(value: object) -> int:
    """Runs over which an explored try must pay back: an int in [1, MAX_PAYBACK_HORIZON]."""
    number = real_number(value)
    if isinstance(number, int) and 1 <= number <= MAX_PAYBACK_HORIZON:
        return number
    raise ConfigError(
        f"payback_horizon={short_repr(value)} is invalid: expected an integer number of runs "
        f"in [1, {MAX_PAYBACK_HORIZON:,}] (14: two weeks of daily runs)"
    )


def check_profile_window(name: str, value: object) -> float:
    """Seconds of a profiling window: in [0, MAX_PROFILE_WINDOW_S]."""
    return check_number(
        name,
        value,
        f"a number of seconds in [0, {MAX_PROFILE_WINDOW_S:g}] (0: by steps only)",
        lambda x: 0 <= x <= MAX_PROFILE_WINDOW_S,
    )


def check_seed(value: object) -> int | None:
    """None (a random seed, drawn once) or an integer the store's ``seed`` column keeps."""
    return check_int("seed", value, minimum=0, none="None")


def check_kwargs(name: str, value: object) -> dict[str, Any]:
    """None or a mapping with str keys (passed on as keyword arguments)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(
            f"{name}={value!r} is invalid: expected None or a mapping (dict) "
            "with str keys, passed to the train function as keyword arguments"
        )
    return dict(value)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|h|d)\s*$")
_DURATION_UNITS_S = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DURATION_S = 366 * 86400.0
"""The longest duration accepted (a year): longer ones are mistakes, and past about 10**13 s
they no longer fit a datetime."""
DURATION_FORMS = (
    "a timedelta, seconds (a number > 0) or a text such as '90min', '6h', '1d', at most 366 days"
)


def parse_duration_s(name: str, value: object) -> float:
    """Seconds > 0 from a timedelta, a number of seconds or ``<n>s|min|h|d``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif real_number(value) is not None:
        number = finite_number(value)  # None for 10**400, which float() cannot take
        seconds = math.nan if number is None else float(number)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _DURATION_UNITS_S[match.group(2)]
    else:
        seconds = math.nan
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_DURATION_S:
        raise ConfigError(f"{name}={short_repr(value)} is invalid: expected {DURATION_FORMS}")
    return seconds


def parse_moment(text: str) -> datetime | None:
    """An ISO 8601 date and time with its offset, else None."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def check_start_deadline(value: object) -> object:
    """None (start when scheduled), a duration after the task starts, or a date and time
    with its offset (usually a template such as ``{{ data_interval_end.add(hours=8) }}``,
    rendered before it is checked)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigError(
                f"start_deadline={value!r} is invalid: expected a timezone-aware datetime"
            )
        return value
    if isinstance(value, str) and parse_moment(value) is not None:
        return value
    try:
        return parse_duration_s("start_deadline", value)
    except ConfigError:
        raise ConfigError(
            f"start_deadline={value!r} is invalid: expected None, {DURATION_FORMS}"
            ", or a date and time with its offset (ISO 8601, e.g. a template such "
            "as '{{ data_interval_end.add(hours=8) }}')"
        ) from None


def check_carbon_zone(value: object) -> str | None:
    if value is None:
        return None
    if is_blank(value) or len(value) > MAX_ZONE_LENGTH:  # type: ignore[arg-type]
        raise ConfigError(
            f"carbon_zone={value!r} is invalid: expected None (no carbon "
            "accounting) or a grid zone such as 'DE', 'FR' or 'US-CAL-CISO' "
            f"(at most {MAX_ZONE_LENGTH} characters, no NUL bytes)"
        )
    return value  # type: ignore[return-value]


def check_carbon_source(value: object) -> str:
    """``electricitymaps``, ``fixed:<g>[:<price>]`` or ``csv:<path>``."""
    allowed = f"expected one of {', '.join(CARBON_SOURCE_KINDS)}"
    if not isinstance(value, str):
        raise ConfigError(f"carbon_source={value!r} is invalid: {allowed}")
    kind, _, rest = value.partition(":")
    if kind == "electricitymaps" and not rest:
        return value
    if kind == "csv" and rest.strip():
        return value
    if kind == "fixed":
        parts = rest.split(":")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            numbers = []
        if 1 <= len(numbers) <= 2:
            problem = grid_value_problem(*numbers)
            if problem is None:
                return value
            allowed = f"{problem}; expected one of {', '.join(CARBON_SOURCE_KINDS)}"
    raise ConfigError(f"carbon_source={value!r} is invalid: {allowed}")


def check_optional_duration(name: str, value: object) -> float | None:
    return None if value is None else parse_duration_s(name, value)


def check_synchronize(value: object) -> Callable[[], object] | None:
    """None (the device's own: CUDA through PyTorch on NVIDIA GPUs) or a function taking no
    argument that returns once the GPUs' queued work is done."""
    if value is None:
        return None
    if callable(value):
        try:
            inspect.signature(value).bind()
            return value
        except ValueError:  # a builtin without a signature: nothing to check
            return value
        except TypeError:
            pass
    raise ConfigError(
        f"synchronize={value!r} is invalid: expected None (PyTorch's CUDA "
        "synchronisation when PyTorch is in use) or a function called with no "
        "argument that waits for the GPUs' queued work (e.g. "
        "jax.effects_barrier)"
    )


_OTHER_CHECKS: dict[str, Check] = {
    "seed": lambda _, v: check_seed(v),
    "heartbeat_s": lambda _, v: check_heartbeat(v),
    "carbon_zone": lambda _, v: check_carbon_zone(v),
    "carbon_source": lambda _, v: check_carbon_source(v),
    "carbon_fallback_g_per_kwh": lambda n, v: (
        None
        if v is None
        else check_number(
            n,
            v,
            "None (no fallback) or a finite number of gCO2e/kWh "
            f"in [{INTENSITY_RANGE_G_PER_KWH[0]:g}, {INTENSITY_RANGE_G_PER_KWH[1]:g}]",
            lambda x: grid_value_problem(x) is None,
        )
    ),
    "carbon_objective": lambda n, v: check_choice(n, v, CARBON_OBJECTIVES),
    "carbon_weight": lambda n, v: check_number(
        n, v, "a number in [0, 1] (the share of emissions in the mix)", lambda x: 0.0 <= x <= 1.0
    ),
    "start_deadline": lambda _, v: check_start_deadline(v),
    "expected_duration": check_optional_duration,
    "synchronize": lambda _, v: check_synchronize(v),
}
"""The checks of the parameters that are not JobConfig's or ProfilerConfig's fields (the
run's seed and heartbeat, the carbon options, ``synchronize``)."""

_USER_NAMES = {"mode": "power_limit_mode", "selector": "power_limit_selector"}
"""ProfilerConfig's fields that users know by another name (the operator's keyword); every
other field of JobConfig and ProfilerConfig is known by its own name."""


def _check_of(config: object, name: str) -> Check:
    """The check a JobConfig's or ProfilerConfig's field ``name`` is declared with."""
    return config.__dataclass_fields__[name].metadata["check"]  # type: ignore[attr-defined]


def _named(check: Check, name: str) -> Callable[[Any], object]:
    return lambda value: check(name, value)


PARAMETER_CHECKS: dict[str, Callable[[Any], object]] = {
    **{
        _USER_NAMES.get(f.name, f.name): _named(
            f.metadata["check"], _USER_NAMES.get(f.name, f.name)
        )
        for config in (JobConfig, ProfilerConfig)
        for f in fields(config)
        if "check" in f.metadata
    },
    **{name: _named(check, name) for name, check in _OTHER_CHECKS.items()},
}
"""One check per job parameter, keyed by the name users write (the operator's keyword): each
raises ConfigError naming it. JobConfig, ProfilerConfig and the operator (constructor and
``partial()``) all check through this table, so a value gets the same answer everywhere."""

_JOB_PARAMETERS = tuple(f.name for f in fields(JobConfig) if f.name != "profiler")
"""JobConfig's own checked fields, in the order they are checked."""
_PROFILER_PARAMETERS = {f.name: _USER_NAMES.get(f.name, f.name) for f in fields(ProfilerConfig)}
"""ProfilerConfig's fields, and the parameter names users know them by."""

JOB_PARAMETERS: dict[str, Field[Any]] = {
    **{f.name: f for f in fields(JobConfig) if f.name not in ("job_id", "profiler")},
    **{_PROFILER_PARAMETERS[f.name]: f for f in fields(ProfilerConfig)},
}
"""Every job parameter, by the name users write (the operator's keyword), and the field of
JobConfig or ProfilerConfig that declares its type, default and meaning: derived from the
two, which are the only declaration. ``config_from_parameters`` builds a job from these
names (for the operator's checks, the simulator's and drift runs' specs and the Capriccio
job); the operator's typed keywords match them one to one, defaults included
(tests/core/common/test_job_parameters.py)."""
REQUIRED_JOB_PARAMETERS = tuple(name for name, f in JOB_PARAMETERS.items() if f.default is MISSING)
"""The job parameters without a default: with all of them known, a job can be checked whole."""


def declared_default(name: str) -> Any:
    """The default the declaration gives job parameter ``name`` (KeyError: not a job
    parameter, or one without a default)."""
    default = JOB_PARAMETERS[name].default
    if default is MISSING:
        raise KeyError(name)
    return default


def config_from_parameters(job_id: str, parameters: Mapping[str, Any]) -> JobConfig:
    """The job named ``job_id`` with ``parameters`` by the names users write (the others at
    their defaults); raises ConfigError naming the first bad one, or one that is no job
    parameter."""
    unknown = [name for name in parameters if name not in JOB_PARAMETERS]
    if unknown:
        raise ConfigError(
            f"{unknown[0]}={parameters[unknown[0]]!r} is invalid: it is not a job parameter; "
            f"expected one of {', '.join(JOB_PARAMETERS)}"
        )
    profiler = {f: parameters[p] for f, p in _PROFILER_PARAMETERS.items() if p in parameters}
    own = {name: parameters[name] for name in _JOB_PARAMETERS if name in parameters}
    return JobConfig(job_id=job_id, **own, profiler=ProfilerConfig(**profiler))
