"""How a ``device`` string's form is read: the parsed :class:`DeviceSpec` and the two shapes a
backend's form takes (GPU indices, or a trace GPU and workload). Parsing only checks the
form, so it runs at DAG-parse time; ``backends.py`` says which backend reads which form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from zeus_airflow.core.common.config import DB_INT_MAX, ConfigError
from zeus_airflow.core.common.traces import WORKLOADS

_INDEX = re.compile(r"[0-9]+")
"""A GPU index: ASCII digits only (``int()`` would also take " 0" or a full-width "０")."""


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed ``device`` string."""

    backend: str
    """The name of its entry in ``backends.BACKENDS``."""
    indices: tuple[int, ...] | None = None
    """The backend's GPU indices; None means every visible GPU (``auto``)."""
    gpu: str = ""
    """Trace GPU name (``v100``, ``a40``...) for replay and simulated devices."""
    workload: str = ""


Parse = Callable[[str, Sequence[str], Sequence[str]], DeviceSpec | None]
"""(the whole text, the parts after the backend's name, every form) -> the spec, or None
when the parts are not this backend's form."""


def by_indices(name: str) -> Parse:
    """``<name>:<i>[,<j>...]``: distinct GPU indices."""

    def parse(text: str, parts: Sequence[str], forms: Sequence[str]) -> DeviceSpec | None:
        if len(parts) != 1:
            return None
        return DeviceSpec(name, indices=_indices(text, parts[0], forms))

    return parse


def by_trace(name: str, default_workload: str | None = None) -> Parse:
    """``<name>:<gpu>:<workload>`` (the workload optional where there is a default)."""

    def parse(text: str, parts: Sequence[str], forms: Sequence[str]) -> DeviceSpec | None:
        counts = (1, 2) if default_workload is not None else (2,)
        if len(parts) not in counts or not all(parts):
            return None
        workload = parts[1] if len(parts) == 2 else str(default_workload)
        return DeviceSpec(name, gpu=parts[0], workload=_workload(text, workload, forms))

    return parse


def invalid(text: object, forms: Sequence[str], problem: str = "") -> NoReturn:
    raise ConfigError(f"device={text!r} is invalid: {problem}expected one of {', '.join(forms)}")


def _indices(text: str, value: str, forms: Sequence[str]) -> tuple[int, ...]:
    parts = value.split(",")
    if not all(_INDEX.fullmatch(i) for i in parts):
        invalid(text, forms)
    indices = tuple(int(i) for i in parts)
    # Indices are kept in the store's integer columns (GPU leases).
    if any(i > DB_INT_MAX for i in indices):
        invalid(text, forms, f"a GPU index is over {DB_INT_MAX}; ")
    if len(set(indices)) != len(indices):
        invalid(text, forms, "a GPU index is repeated; ")
    return indices


def _workload(text: str, name: str, forms: Sequence[str]) -> str:
    if name not in WORKLOADS:
        raise ConfigError(
            f"device={text!r} is invalid: workload {name!r} is not one of "
            f"{', '.join(sorted(WORKLOADS))} (device forms: {', '.join(forms)})"
        )
    return name
