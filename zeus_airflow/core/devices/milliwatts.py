"""Power limits between W (everything above the devices) and mW (NVML and zeusd alike).

A limit read from a GPU is remembered at the exact mW read, so writing back the W it was shown
as restores an odd limit (187.5 W, shown as 188 W) exactly; any other W must lie inside the
range, which is rounded inwards to whole W.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from zeus_airflow.core.devices.base import DeviceError

ReadLimits = dict[tuple[int, int], int]
"""(position in the group, W) -> the exact mW read from that GPU."""


def w_from_mw(limit_mw: int) -> int:
    return round(limit_mw / 1000)


def whole_w_range(ranges_mw: Iterable[Sequence[int]]) -> tuple[int, int]:
    """The range every GPU accepts ((min, max) mW each), rounded inwards to whole W."""
    ranges = list(ranges_mw)
    low_mw = max(int(low) for low, _ in ranges)
    high_mw = min(int(high) for _, high in ranges)
    return -(-low_mw // 1000), high_mw // 1000


def remember(read: ReadLimits, limits_mw: Sequence[int]) -> tuple[int, ...]:
    """The limits read, in W, each remembered at its exact mW."""
    for position, limit_mw in enumerate(limits_mw):
        read[position, w_from_mw(limit_mw)] = limit_mw
    return tuple(w_from_mw(mw) for mw in limits_mw)


def to_mw(
    read: ReadLimits,
    limits_w: Sequence[int],
    range_w: tuple[int, int],
    model: str,
    indices: Sequence[int],
) -> list[int]:
    """One mW limit per GPU, every value checked before any GPU changes."""
    if len(limits_w) != len(indices):
        raise DeviceError(
            f"limits_w={list(limits_w)} is invalid: expected {len(indices)} "
            f"limits, one per GPU {list(indices)}"
        )
    return [
        _one_mw(read, position, limit_w, range_w, model)
        for position, limit_w in enumerate(limits_w)
    ]


def _one_mw(
    read: ReadLimits, position: int, limit_w: int, range_w: tuple[int, int], model: str
) -> int:
    read_mw = read.get((position, limit_w))
    if read_mw is not None:
        return read_mw
    low, high = range_w
    if not low <= limit_w <= high:
        raise DeviceError(
            f"power limit {limit_w} W is invalid for {model}: expected a value in [{low}, {high}] W"
        )
    return int(limit_w) * 1000


def text(value: str | bytes) -> str:
    """A name from a driver binding: nvidia-ml-py before 11.515 returns bytes."""
    return value.decode() if isinstance(value, bytes) else value
