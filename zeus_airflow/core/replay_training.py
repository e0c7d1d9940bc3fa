"""A train function that "trains" a paper workload on the replay GPU.

Each try samples one traced seed of the chosen batch size: that seed's epochs-to-target
decide when the reported metric reaches the target. Steps run in bulk on the virtual clock,
so a whole recurrence takes well under a millisecond of real time per epoch.
"""

from __future__ import annotations

import math

import numpy as np

from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.run import TrainingRun


class ReplayTraining:
    """Callable train function bound to one replay GPU and one random stream."""

    def __init__(self, gpu: ReplayGPU, seed: int | None = None) -> None:
        self.gpu = gpu
        self.rng = np.random.default_rng(seed)

    def __call__(self, run: TrainingRun) -> dict[str, float]:
        trace = self.gpu.trace
        self.gpu.use_batch_size(run.batch_size)
        runs = trace.target_epochs[run.batch_size]
        needed = float(runs[self.rng.integers(len(runs))])
        for epoch in run.epochs():
            run.run_steps(self.gpu.steps_per_epoch(), self.gpu.advance_steps)
            run.report_metric(self.metric_after(epoch, needed))
        return {"epochs_to_target": needed}

    def metric_after(self, epoch: int, needed: float) -> float:
        """The target exactly once ``needed`` epochs are done; short of it before."""
        workload = self.gpu.trace.workload
        progress = 1.0 if epoch >= needed else (0.0 if math.isinf(needed) else epoch / needed)
        if workload.higher_is_better:
            return workload.target_metric * (0.5 + 0.5 * progress) if progress < 1 \
                else workload.target_metric
        return workload.target_metric * (2.0 - progress)
