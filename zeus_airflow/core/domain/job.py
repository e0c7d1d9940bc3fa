"""A job in the store (a version of it, as the reports list them), the GPUs it runs on, and
the state one decision reads.

:class:`JobState` is what the store reads inside a decision's transaction, as it is stored:
this GPU setup's arm statistics and, apart, the runs and profiles of other setups. Turning
it into the policy's :class:`~zeus_airflow.core.domain.decision.JobSnapshot` (translating
other setups' runs, ``core/decide/translation.py``) is the engine's work, not the store's.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from zeus_airflow.core.common.config import DEFAULT_ETA, JobConfig
from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.domain.decision import (
    ArmStats,
    BudgetLedger,
    Decision,
    ExplorationStep,
    SizeEvidence,
)
from zeus_airflow.core.domain.outcome import PowerProfile

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class JobRef:
    """A job version in the store. A changed configuration starts a new version."""

    id: int
    job_id: str
    version: int
    config: JobConfig


@dataclass(frozen=True)
class Version:
    """One version of a job (a changed configuration or a reset starts a new one)."""

    pk: int
    job_id: str
    version: int
    active: bool
    created_at: datetime
    config_json: str
    """The configuration as stored: parsed (and checked) on first use of ``config``, which a
    list of a thousand jobs does not need."""

    @functools.cached_property
    def config(self) -> JobConfig:
        return JobConfig.from_json(self.config_json)

    @functools.cached_property
    def default_batch_size(self) -> int:
        """b0, read without checking the whole configuration."""
        return int(json.loads(self.config_json)["default_batch_size"])

    @functools.cached_property
    def eta(self) -> float:
        """The cost's weight of energy, read without checking the whole configuration."""
        return float(json.loads(self.config_json).get("eta", DEFAULT_ETA))

    @property
    def ref(self) -> JobRef:
        return JobRef(self.pk, self.job_id, self.version, self.config)


@dataclass(frozen=True)
class DeviceInfo:
    """The GPUs a run trains on, as a decision and a power profile need them: profiles are
    kept per model and count, and a decision's limits are these GPUs' candidates."""

    model: str
    """As the device names it, e.g. ``NVIDIA A40`` or ``V100 (replay)``."""
    count: int
    measurement: MeasurementKind
    power_limits_w: tuple[int, ...]
    """Candidate limits, highest first."""
    limits_fixed: bool = False
    """The task cannot change these GPUs' limits (a MIG instance, no root and no zeusd, a
    limit another task holds, zeusd unreachable): its tries measure at the current limits,
    as in measure mode, whatever the job's ``power_limit_mode``."""


@dataclass(frozen=True)
class FleetKey:
    """Which GPUs a run used: costs are comparable only within one key."""

    gpu_model: str
    gpu_count: int


@dataclass(frozen=True)
class ForeignObservation:
    """An observed cost from another fleet key, newest first in the lists passed around."""

    fleet: FleetKey
    batch_size: int
    cost: float
    reached_target: bool


@dataclass(frozen=True)
class Observed:
    """One observed cost of an arm on this GPU setup, with its decision number."""

    seq: int
    cost: float
    reached_target: bool


Successes = Mapping[int, tuple[float, int]]
"""Per batch size, the sum and count of its observed costs that reached the target."""


@dataclass(frozen=True)
class JobState:
    """What the store holds about a job, read for one decision on ``device``."""

    job: JobRef
    device: DeviceInfo
    excluded: frozenset[int]
    """Batch sizes that already failed in the current recurrence."""
    exploration: tuple[ExplorationStep, ...]
    """The pruning walk's finished steps, in decision order."""
    deferred: tuple[ExplorationStep, ...]
    """Walk steps stopped at the exploration budget's cap, in decision order."""
    in_flight: tuple[int, ...]
    """Batch sizes of exploration trials running now."""
    observations: Mapping[int, ArmStats]
    """Per batch size, its observed costs on this GPU setup (the newest ``window_size``)."""
    successes: Successes
    """Of those, the ones that reached the target."""
    evidence: Mapping[int, SizeEvidence]
    """For each size with a failed exploration step: its later record."""
    profiles: Mapping[tuple[FleetKey, int], PowerProfile]
    """Every power profile of the job, by GPU setup and batch size."""
    foreign: tuple[ForeignObservation, ...]
    """Observed costs on other GPU setups, newest first (none when the job never moved)."""
    missed: frozenset[int] = frozenset()
    """Of ``excluded``, the sizes that missed the target within max epochs in this
    recurrence."""
    ledger: BudgetLedger = field(default_factory=BudgetLedger)
    """The exploration budget's books on this GPU setup."""
    history: Mapping[int, tuple[Observed, ...]] = field(default_factory=dict)
    """With drift detection: per batch size, the costs in ``observations`` one by one, oldest
    first (at most ``DRIFT_MEMORY``), for the engine to look for change points in."""

    @property
    def here(self) -> FleetKey:
        return FleetKey(self.device.model, self.device.count)


Decide = Callable[[JobState, "np.random.Generator"], Decision]
"""The engine's part of a decision: from the job's state and the decision's random stream
(``numpy.random.default_rng([job seed, decision number])``), the decision."""
