"""A train function that "trains" a paper workload on the replay GPU.

Each try samples one traced seed of the chosen batch size: that seed's epochs-to-target
decide when the reported metric reaches the target. The draw is a function of (seed,
recurrence, batch size): a recurrence is one day's data, so a size run twice in it needs the
same epochs both times, and the Default baseline, replayed with the same seed, trains the
default batch size on the very data each Zeus recurrence saw. Steps run in bulk on the
virtual clock, so a whole recurrence takes well under a millisecond of real time per epoch.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.train.run import TrainingRun


class SteppedGPU(Protocol):
    """A GPU whose steps run in bulk on its own clock (the replay GPU): the training layer
    names no device backend (``core/devices/backends.py``)."""

    trace: WorkloadTrace

    def use_batch_size(self, batch_size: int) -> None: ...

    def steps_per_epoch(self) -> int: ...

    def advance_steps(self, steps: int) -> None: ...


class ReplayTraining:
    """Callable train function bound to one replay GPU and one random stream."""

    def __init__(self, gpu: SteppedGPU, seed: int | None = None) -> None:
        self.gpu = gpu
        self.seed = seed if seed is not None else int(np.random.default_rng().integers(2**31))
        self.recurrence: int | None = None
        """Which recurrence (day of data) the next tries replay, set by a caller that runs
        recurrences in order; None: every try draws afresh."""
        self._tries = 0

    def __call__(self, run: TrainingRun) -> dict[str, float]:
        trace = self.gpu.trace
        self.gpu.use_batch_size(run.batch_size)
        runs = trace.target_epochs[run.batch_size]
        self._tries += 1
        day = self.recurrence if self.recurrence is not None else 2**32 + self._tries
        draw = np.random.default_rng([self.seed, day, run.batch_size])
        needed = float(runs[draw.integers(len(runs))])
        for epoch in run.epochs():
            run.run_steps(self.gpu.steps_per_epoch(), self.gpu.advance_steps)
            run.report_metric(self.metric_after(epoch, needed))
        return {"epochs_to_target": needed}

    def metric_after(self, epoch: int, needed: float) -> float:
        """The target exactly once ``needed`` epochs are done; short of it before."""
        workload = self.gpu.trace.workload
        progress = 1.0 if epoch >= needed else (0.0 if math.isinf(needed) else epoch / needed)
        if workload.higher_is_better:
            return (
                workload.target_metric * (0.5 + 0.5 * progress)
                if progress < 1
                else workload.target_metric
            )
        return workload.target_metric * (2.0 - progress)
