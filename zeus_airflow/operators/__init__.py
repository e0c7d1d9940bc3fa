"""The Airflow layer: the training operator and its link to the job's page.

Both are loaded on first use, so that the Airflow-free helpers of this package (``naming``,
``replay``, ``summary``) can be imported without Airflow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zeus_airflow.operators.links import ZeusJobLink
    from zeus_airflow.operators.train import ZeusTrainOperator

__all__ = ["ZeusJobLink", "ZeusTrainOperator"]

_LAZY = {
    "ZeusJobLink": "zeus_airflow.operators.links",
    "ZeusTrainOperator": "zeus_airflow.operators.train",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'zeus_airflow.operators' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
