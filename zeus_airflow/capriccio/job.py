"""The Capriccio retraining job's settings: one place for the CLI run and the DAG.

Torch-free, so that DAG files and the CLI can read them without importing PyTorch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zeus_airflow.core.common.config import DEFAULT_ETA, JobConfig, config_from_parameters

SIMULATED_DEVICE = "simulated:v100:sentiment140"
"""A V100 following the power curve the paper measured for BERT on Sentiment140 at b0 = 128
(``summary_power_v100.csv``), the workload Capriccio was built from."""

CAPRICCIO_PARAMETERS: dict[str, Any] = {
    "batch_sizes": (32, 64, 128, 256, 512, 1024),
    "default_batch_size": 128,  # the paper's b0 for Sentiment140
    # Validation accuracy a run must reach; every slice of the demo corpus can.
    "target_metric": 0.87,
    "max_epochs": 10,
    # The paper's window for Capriccio: about two weeks of daily runs.
    "window_size": 10,
    # Above the paper's 2: the demo corpus's abrupt shift raises every batch size's cost
    # 1.5-2.5x for a few slices, and an early-stop bound that every size exceeds leaves the day
    # without a model (docs/drift.md, "Early stopping under drift").
    "beta": 3.0,
    # Short profiling slices: an epoch of a demo slice is 10 to 320 steps.
    "warmup_steps": 2,
    "profile_steps": 8,
    # Slices sized by steps only: the demo trains on the simulated GPU, whose power reading is
    # exact at once (no NVML averaging window to wait out), so its experiment's figures stay
    # those of fixed 2 + 8 step slices.
    "warmup_s": 0.0,
    "profile_s": 0.0,
}
"""The Capriccio job's values of job parameters (``config.JOB_PARAMETERS``, by the operator's
names); the others, the exploration budget among them, keep the operator's defaults."""


@dataclass(frozen=True)
class CapriccioJob:
    """The daily retraining job's settings, shared by ``capriccio run`` and the DAG."""

    changes: Mapping[str, Any] = field(default_factory=dict)
    """Job parameters that differ from :data:`CAPRICCIO_PARAMETERS` (a run's options, a
    test's smaller job)."""

    @property
    def parameters(self) -> dict[str, Any]:
        """The job's parameters by the operator's names, the unset ones left out."""
        return {**CAPRICCIO_PARAMETERS, **self.changes}

    def operator_kwargs(self) -> dict[str, Any]:
        """Arguments for ``ZeusTrainOperator`` (besides ``train`` and the device)."""
        parameters = self.parameters
        return {**parameters, "batch_sizes": list(parameters["batch_sizes"])}

    def job_config(self, job_id: str, eta: float = DEFAULT_ETA) -> JobConfig:
        return config_from_parameters(job_id, {**self.parameters, "eta": eta})
