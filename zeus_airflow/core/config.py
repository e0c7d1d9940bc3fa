"""A job's configuration and its validation: the one place that knows the defaults.

Every entry point (operator, CLI, simulator) builds a :class:`JobConfig`, so a bad value gets
the same error, naming the parameter and the allowed values, wherever it comes from, and
always before any GPU setting is touched.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Literal

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
DEFAULT_WARMUP_STEPS = 10
DEFAULT_PROFILE_STEPS = 40
DEFAULT_MAX_SLOWDOWN = 1.1


class ConfigError(ValueError):
    """A parameter is out of its allowed range; the message names it."""


@dataclass(frozen=True)
class ProfilerConfig:
    """How the just-in-time power profiler measures each candidate power limit."""

    warmup_steps: int = DEFAULT_WARMUP_STEPS
    """Steps run at a newly set limit before measuring (clocks and caches settle)."""
    profile_steps: int = DEFAULT_PROFILE_STEPS
    """Steps measured per limit."""
    mode: PowerLimitMode = "optimize"
    selector: str = "zeus"
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN
    """Only for ``min-energy-within-slowdown``: allowed time per step over the fastest limit."""

    def __post_init__(self) -> None:
        _require(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, "an integer >= 0")
        _require(self.profile_steps >= 1, "profile_steps", self.profile_steps, "an integer >= 1")
        _require(self.mode in POWER_LIMIT_MODES, "power_limit_mode", self.mode,
                 f"one of {', '.join(POWER_LIMIT_MODES)}")
        _require(self.selector in SELECTORS, "power_limit_selector", self.selector,
                 f"one of {', '.join(SELECTORS)}")
        _require(self.max_slowdown >= 1.0, "max_slowdown", self.max_slowdown, "a number >= 1.0")


@dataclass(frozen=True)
class JobConfig:
    """What a recurring training job optimises, and how.

    Costs are in the paper's units: ``eta * energy_j + (1 - eta) * max_power_w * time_s``.
    """

    job_id: str
    batch_sizes: tuple[int, ...]
    default_batch_size: int
    target_metric: float
    max_epochs: int
    higher_is_better: bool = True
    eta: float = DEFAULT_ETA
    beta: float = DEFAULT_BETA
    window_size: int | None = None
    """Each arm's posterior uses only its N most recent observations (data drift)."""
    max_tries: int | None = None
    """Tries per recurrence when a batch size fails; None means one per batch size, plus the
    cheapest one run to the end once every surviving size has failed."""
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)

    def __post_init__(self) -> None:
        _require(bool(self.job_id) and isinstance(self.job_id, str), "job_id", self.job_id,
                 "a non-empty string")
        sizes = tuple(self.batch_sizes)
        _require(len(sizes) > 0, "batch_sizes", list(sizes), "a non-empty list of integers > 0")
        _require(all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in sizes),
                 "batch_sizes", list(sizes), "integers > 0")
        _require(list(sizes) == sorted(set(sizes)), "batch_sizes", list(sizes),
                 "strictly increasing integers (sorted, no duplicates)")
        object.__setattr__(self, "batch_sizes", sizes)
        _require(self.default_batch_size in sizes, "default_batch_size", self.default_batch_size,
                 f"one of batch_sizes {list(sizes)}")
        _require(isinstance(self.target_metric, int | float) and math.isfinite(self.target_metric),
                 "target_metric", self.target_metric, "a finite number")
        _require(isinstance(self.max_epochs, int) and self.max_epochs >= 1, "max_epochs",
                 self.max_epochs, "an integer >= 1")
        _require(isinstance(self.eta, int | float) and 0.0 <= self.eta <= 1.0, "eta", self.eta,
                 "a number in [0, 1]")
        _require(isinstance(self.beta, int | float) and self.beta > 1.0, "beta", self.beta,
                 "a number > 1")
        _require(self.window_size is None or (isinstance(self.window_size, int)
                                              and self.window_size >= 1),
                 "window_size", self.window_size, "None (no window) or an integer >= 1")
        _require(self.max_tries is None
                 or (isinstance(self.max_tries, int) and self.max_tries >= 1),
                 "max_tries", self.max_tries, "None or an integer >= 1")

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
        ``max_tries`` and the profiler's step counts do not change what a cost means.
        """
        relevant = {k: v for k, v in asdict(self).items() if k not in ("job_id", "max_tries")}
        relevant["profiler"] = {"mode": self.profiler.mode, "selector": self.profiler.selector,
                                "max_slowdown": self.profiler.max_slowdown}
        return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobConfig:
        data = json.loads(text)
        data["batch_sizes"] = tuple(data["batch_sizes"])
        data["profiler"] = ProfilerConfig(**data["profiler"])
        return cls(**data)


def _require(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: expected {allowed}")

