"""The visibility variables (``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``), read one way
for every vendor.

An entry is an index (ASCII digits: ``int()`` would also take "+1", "1_0" or a full-width
digit, none of which CUDA or HIP read as an index) or a GPU's UUID, whole or a unique prefix
(``GPU-`` and the hex digits, as ``nvidia-smi -L`` prints it; AMD's UUIDs as ``amd-smi list``
does). What an entry that names no GPU means is the vendor's: CUDA hides it and every entry
after it (``nvml.py``), HIP refuses to start, so AMD's entries are checked here, and a
:class:`VisibleDevicesError` names the variable and its value: a configuration to fix, never a
library that is missing (issue 48).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from zeus_airflow.core.devices.base import DeviceError

_INDEX = re.compile(r"[0-9]+")


class VisibleDevicesError(DeviceError):
    """A visibility variable names no GPU as written (the message names the variable)."""


def entries(value: str) -> list[str]:
    """The comma-separated entries of a variable's value, stripped."""
    return [e.strip() for e in value.split(",")]


def index_of(entry: str, count: int) -> int | None:
    """The index an entry of ASCII digits names, in [0, count), else None."""
    if not _INDEX.fullmatch(entry):
        return None
    index = int(entry)
    return index if index < count else None


def uuid_match(entry: str, uuids: Sequence[str]) -> int | None:
    """The position of the one UUID ``entry`` is a prefix of (case-insensitive; the
    ``GPU-`` that CUDA and HIP put before a UUID is optional), else None: an ambiguous
    prefix names no GPU, as in CUDA."""
    wanted = _bare(entry)
    if not wanted:
        return None
    matches = [i for i, uuid in enumerate(uuids) if _bare(uuid).startswith(wanted)]
    return matches[0] if len(matches) == 1 else None


def first_set(env: Mapping[str, str], names: Sequence[str]) -> tuple[str, str] | None:
    """(name, value) of the first of ``names`` that is set (even empty), else None."""
    for name in names:
        if name in env:
            return name, env[name]
    return None


def strict_positions(name: str, value: str, count: int, uuids: Sequence[str]) -> tuple[int, ...]:
    """Every entry of ``name`` as a position in [0, count) (an index, or a UUID of
    ``uuids``), as HIP reads them: any entry that names no GPU, a repeat or an empty value
    is a VisibleDevicesError naming the variable."""
    found: list[int] = []
    for entry in entries(value) if value.strip() else [""]:
        position = index_of(entry, count)
        if position is None:
            position = uuid_match(entry, uuids)
        if position is None or position in found:
            why = "repeats a GPU" if position in found else "names no GPU"
            raise VisibleDevicesError(
                f"{name}={value!r} is invalid: entry {entry!r} {why}; expected distinct "
                f"indices in [0, {count - 1}] or GPU UUIDs ({', '.join(uuids) or 'none'}), "
                "or leave it unset"
            )
        found.append(position)
    return tuple(found)


def _bare(uuid: str) -> str:
    text = uuid.strip().upper()
    return text[4:] if text.startswith("GPU-") else text
