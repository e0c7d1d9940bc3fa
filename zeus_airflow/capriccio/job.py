"""The Capriccio retraining job's settings: one place for the CLI run and the DAG.

Torch-free, so that DAG files and the CLI can read them without importing PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zeus_airflow.core.common.config import (
    DEFAULT_ETA,
    DEFAULT_EXPLORATION_BUDGET,
    JobConfig,
    ProfilerConfig,
)

SIMULATED_DEVICE = "simulated:v100:sentiment140"
"""A V100 following the power curve the paper measured for BERT on Sentiment140 at b0 = 128
(``summary_power_v100.csv``), the workload Capriccio was built from."""


@dataclass(frozen=True)
class CapriccioJob:
    """The daily retraining job's settings, shared by ``capriccio run`` and the DAG."""

    batch_sizes: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    default_batch_size: int = 128
    """The paper's b0 for Sentiment140."""
    target_metric: float = 0.87
    """Validation accuracy a run must reach; every slice of the demo corpus can."""
    max_epochs: int = 10
    window_size: int | None = 10
    """The paper's window for Capriccio: about two weeks of daily runs."""
    beta: float = 3.0
    """Above the paper's 2: the demo corpus's abrupt shift raises every batch size's cost
    1.5-2.5x for a few slices, and an early-stop bound that every size exceeds leaves the day
    without a model (docs/drift.md, "Early stopping under drift")."""
    exploration_budget: float | None = DEFAULT_EXPLORATION_BUDGET
    """The operator's (core/decide/budget.py)."""
    warmup_steps: int = 2
    profile_steps: int = 8
    """Short profiling slices: an epoch of a demo slice is 10 to 320 steps."""
    warmup_s: float = 0.0
    profile_s: float = 0.0
    """Slices sized by steps only: the demo trains on the simulated GPU, whose power reading
    is exact at once (no NVML averaging window to wait out), so its experiment's figures stay
    those of fixed 2 + 8 step slices."""

    def operator_kwargs(self) -> dict[str, Any]:
        """Arguments for ``ZeusTrainOperator`` (besides ``train`` and the device)."""
        return {
            "batch_sizes": list(self.batch_sizes),
            "default_batch_size": self.default_batch_size,
            "target_metric": self.target_metric,
            "max_epochs": self.max_epochs,
            "window_size": self.window_size,
            "beta": self.beta,
            "exploration_budget": self.exploration_budget,
            "warmup_steps": self.warmup_steps,
            "profile_steps": self.profile_steps,
            "warmup_s": self.warmup_s,
            "profile_s": self.profile_s,
        }

    def job_config(self, job_id: str, eta: float = DEFAULT_ETA) -> JobConfig:
        return JobConfig(
            job_id,
            self.batch_sizes,
            self.default_batch_size,
            self.target_metric,
            self.max_epochs,
            eta=eta,
            beta=self.beta,
            window_size=self.window_size,
            exploration_budget=self.exploration_budget,
            profiler=ProfilerConfig(
                warmup_steps=self.warmup_steps,
                profile_steps=self.profile_steps,
                warmup_s=self.warmup_s,
                profile_s=self.profile_s,
            ),
        )
