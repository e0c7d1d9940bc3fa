"""Capriccio end to end (paper §6.4): one recurrence per daily slice through the real engine.

Each slice is a day's retraining: the engine picks a batch size with the job's windowed
posteriors, the profiler picks a power limit on the simulated GPU, and a fresh PyTorch model
really trains on the slice on this machine's CPU. The corpus is encoded once; each slice is a
view of it. A recurrence in which every batch size fails (early-stopped or short of the
target) is recorded as such and the run goes on to the next day, as a daily DAG would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import numpy as np

from zeus_airflow.capriccio.corpus import Tweets
from zeus_airflow.capriccio.job import CapriccioJob
from zeus_airflow.capriccio.model import ModelSettings, encode
from zeus_airflow.capriccio.slicing import (
    DEFAULT_SPLIT_SEED,
    SliceSizes,
    SliceSpec,
    plan_slices,
    split_slice,
)
from zeus_airflow.capriccio.training import CapriccioTraining, SliceData
from zeus_airflow.core.common.config import DEFAULT_ETA, ConfigError
from zeus_airflow.core.common.cost import zeus_cost
from zeus_airflow.core.decide.policy import NoFeasibleBatchSizeError
from zeus_airflow.core.devices.base import GPUGroup, max_power_w
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.base import Store
from zeus_airflow.core.train.engine import Engine, RecurrenceResult

JOB_ID = "capriccio"


@dataclass(frozen=True)
class SliceOutcome:
    """One slice's retraining, every try summed. Energy in J and time in s are the simulated
    GPU's; ``wall_s`` is this machine's."""

    index: int
    day: date
    post_shift_share: float | None
    """Share of the slice's tweets from on or after the abrupt shift (None: no known shift)."""
    batch_size: int | None
    """Batch size of the try that reached the target; None when none did."""
    power_limit_w: int | None
    energy_j: float
    time_s: float
    cost: float
    epochs: int
    """Epochs of every try (0 when the recurrence failed: the engine raised before reporting
    its tries; their energy and time are counted all the same)."""
    tries: tuple[tuple[int, str, str], ...]
    """Each try's (batch size, phase, stop reason), in order; empty when the recurrence
    failed (see ``failure``)."""
    failure: str
    val_accuracy: float | None
    wall_s: float

    @property
    def reached_target(self) -> bool:
        return self.batch_size is not None

    @property
    def tried(self) -> str:
        """The tries as ``batch size:phase:stop reason``, or why the recurrence failed."""
        return " ".join(f"{b}:{phase}:{stop}" for b, phase, stop in self.tries) or self.failure


def run_capriccio(
    tweets: Tweets,
    sizes: SliceSizes,
    job: CapriccioJob,
    store: Store,
    device: GPUGroup,
    slices: int,
    *,
    seed: int = 1,
    shift: date | None = None,
    eta: float = DEFAULT_ETA,
    split_seed: int = DEFAULT_SPLIT_SEED,
    settings: ModelSettings | None = None,
    on_slice: Callable[[SliceOutcome], None] = lambda outcome: None,
) -> list[SliceOutcome]:
    """Retrain on the first ``slices`` slices of a time-sorted corpus, one recurrence each."""
    plan = plan_slices(tweets, sizes)
    if not (isinstance(slices, int) and 1 <= slices <= len(plan)):
        raise ConfigError(
            f"slices={slices!r} is invalid: the corpus has {len(plan)} slices of "
            f"{sizes.slice_size} tweets; expected an integer in [1, {len(plan)}]"
        )
    settings = settings or ModelSettings()
    encoded = encode(tweets.texts, tweets.label, settings.buckets)
    engine = Engine(store, device, job.job_config(JOB_ID, eta), seed=seed, heartbeat_s=None)
    outcomes = []
    for spec in plan[:slices]:
        train, val = split_slice(spec, sizes, split_seed)
        training = CapriccioTraining(
            SliceData(encoded.take(train), encoded.take(val)),
            settings,
            seed=seed * 1000 + spec.index,
        )
        outcome = _retrain(engine, training, spec, _post_shift_share(tweets, spec, shift))
        on_slice(outcome)
        outcomes.append(outcome)
    return outcomes


def _retrain(
    engine: Engine, training: CapriccioTraining, spec: SliceSpec, post_shift_share: float | None
) -> SliceOutcome:
    device = engine.device
    energy_j, time_s, started = device.energy_j(), device.now_s(), time.perf_counter()
    key = RecurrenceKey(run_id=f"slice-{spec.index:02d}-{spec.day.isoformat()}")
    failure = ""
    try:
        result: RecurrenceResult | None = engine.run_recurrence(training, key)
    except NoFeasibleBatchSizeError as err:
        engine.log.warning("slice %d (%s): %s", spec.index, spec.day, err)
        result, failure = None, f"failed: {err}"
    energy_j, time_s = device.energy_j() - energy_j, device.now_s() - time_s
    reached = result is not None and result.reached_target
    return SliceOutcome(
        index=spec.index,
        day=spec.day,
        post_shift_share=post_shift_share,
        batch_size=result.batch_size if reached and result else None,
        power_limit_w=result.power_limit_w if reached and result else None,
        energy_j=energy_j,
        time_s=time_s,
        cost=zeus_cost(energy_j, time_s, engine.config.eta, max_power_w(device)),
        epochs=result.epochs if result else 0,
        tries=tuple((t.outcome.batch_size, t.phase, t.outcome.stop_reason) for t in result.tries)
        if result
        else (),
        failure=failure,
        val_accuracy=result.final.outcome.last_metric if result else None,
        wall_s=time.perf_counter() - started,
    )


def _post_shift_share(tweets: Tweets, spec: SliceSpec, shift: date | None) -> float | None:
    if shift is None:
        return None
    days = tweets.day[spec.start : spec.stop]
    return float(np.mean(days >= np.datetime64(shift, "D")))
