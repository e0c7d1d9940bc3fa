"""A train function that replays a paper workload, for DAGs with ``device="replay:..."``.

The operator creates the replay GPU when the task runs, so the DAG cannot bind one at parse
time; :func:`replay_train` finds it on the :class:`~zeus_airflow.core.train.run.TrainingRun`.
:func:`replay_job_settings` gives the operator the workload's batch sizes, b0, target and
epoch budget from the same traces, so a DAG never restates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.common.traces import load_workload_trace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.core.train.run import TrainingRun


def replay_train(run: TrainingRun) -> dict[str, float]:
    """Replay one try: epochs to target drawn from a random traced seed of the batch size."""
    gpu = run.device
    if not isinstance(gpu, ReplayGPU):
        raise ConfigError(
            f"train=replay_train is invalid with a {run.device.measurement} "
            "device: expected device='replay:<gpu>:<workload>'"
        )
    return ReplayTraining(gpu)(run)


def replay_job_settings(
    gpu: str, workload: str, traces_dir: str | Path | None = None
) -> dict[str, Any]:
    """Operator arguments for a replayed workload: batch sizes, b0, target, max epochs."""
    trace = load_workload_trace(resolve_traces_dir(traces_dir), gpu, workload)
    return {
        "batch_sizes": list(trace.batch_sizes),
        "default_batch_size": trace.default_batch_size,
        "target_metric": trace.workload.target_metric,
        "higher_is_better": trace.workload.higher_is_better,
        "max_epochs": trace.workload.max_epochs,
    }
