"""zeus-airflow: energy-aware scheduled retraining for Apache Airflow (Zeus, NSDI'23).

``from zeus_airflow import ZeusTrainOperator, TrainingRun``. Both are loaded on first use, so
that importing the package (as the core, the CLI and the simulator do) never imports Airflow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zeus_airflow.core.train.run import TrainingRun
    from zeus_airflow.operators.train import ZeusTrainOperator

__all__ = ["TrainingRun", "ZeusTrainOperator"]

_LAZY = {
    "TrainingRun": "zeus_airflow.core.train.run",
    "ZeusTrainOperator": "zeus_airflow.operators.train",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'zeus_airflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
