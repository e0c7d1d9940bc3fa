"""Waiting for the GPU's queued work at a measurement window's edge.

PyTorch (like most frameworks) launches CUDA kernels asynchronously: the host returns from a
training step while the GPU still has its kernels queued. A window that reads the energy
counter at once would end before the work it measures, and the next window (at another power
limit, say) would be charged with it. Upstream Zeus synchronises at every window boundary;
so does :class:`~zeus_airflow.core.train.monitor.EnergyMonitor`, through the device group's
``synchronize()``.

:class:`CUDASynchronizer` is what NVML GPU groups use: it synchronises the group's CUDA
devices through PyTorch, and only when PyTorch is already imported and has initialised CUDA.
It never imports torch itself (the base install has none), and a process that never touched
CUDA has no queued work to wait for. Users of other frameworks pass their own callable
(``synchronize=`` of the operator and the engine), e.g. ``jax.effects_barrier`` or
``cupy.cuda.Device().synchronize``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

Synchronize = Callable[[], None]
"""A function that returns once the GPUs' queued work is done."""

log = logging.getLogger(__name__)


def no_sync() -> None:
    """For devices whose work is synchronous (replayed, simulated on the CPU)."""


class CUDASynchronizer:
    """``torch.cuda.synchronize(d)`` for each CUDA ordinal ``d`` of the group.

    ``ordinals`` are CUDA's device numbers (positions in ``CUDA_VISIBLE_DEVICES``), not NVML
    indices: :func:`zeus_airflow.core.devices.nvml.cuda_ordinals` maps one to the other.
    """

    def __init__(self, ordinals: Sequence[int]) -> None:
        self.ordinals = tuple(ordinals)
        self._said_unmapped = False

    def __call__(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return  # nothing imported torch: no CUDA work of PyTorch's can be queued
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_available() or not cuda.is_initialized():
            return
        if not self.ordinals:
            if not self._said_unmapped:
                self._said_unmapped = True
                log.warning(
                    "the measured GPUs are not visible to CUDA in this process "
                    "(CUDA_VISIBLE_DEVICES): measurement windows cannot wait for "
                    "their queued work; pass synchronize= to wait for it yourself"
                )
            return
        for ordinal in self.ordinals:
            cuda.synchronize(ordinal)
