"""Every figure that leaves the process is finite or None.

An XCom travels as strict JSON (Airflow's Execution API refuses NaN and infinities), and so
must what the CLI prints for programs (``jq``, JavaScript's ``JSON.parse`` reject
``Infinity``); PostgreSQL would keep a NaN that SQLite turns into NULL. The figures are
checked where they enter (``core/common/config.py``, the outbox's checks), so a non-finite one
here is a measurement gone wrong or a store written before those checks: it is shown as
missing (None), never as a crash or a value a strict parser refuses.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import IO, Any


def finite_or_none(value: Any) -> Any:
    """``value``, or None for a float that is NaN or infinite (other values as they are)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def strict_json_value(value: Any) -> Any:
    """``value`` with every NaN or infinite float, in any dict, list or tuple, made None."""
    if isinstance(value, Mapping):
        return {key: strict_json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json_value(item) for item in value]
    return finite_or_none(value)


def dump_strict_json(value: Any, out: IO[str], **options: Any) -> None:
    """``json.dump`` that writes strict JSON: non-finite numbers as ``null``."""
    json.dump(strict_json_value(value), out, allow_nan=False, **options)
