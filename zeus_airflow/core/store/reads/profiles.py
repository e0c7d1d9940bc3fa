"""Measured power profile points, as the reports show them and scale by."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from zeus_airflow.core.store.reads.base import Reads
from zeus_airflow.core.store.tables import power_profiles

_p = power_profiles.c
_POINT = (
    _p.batch_size,
    _p.gpu_model,
    _p.gpu_count,
    _p.power_limit_w,
    _p.avg_power_w,
    _p.steps_per_s,
)
"""A point's columns: batch size, GPU model and count, limit (W), power (W), steps/s."""


class ProfileReads(Reads):
    def profile_points(self, job_pk: int, batch_size: int | None = None) -> list[tuple[Any, ...]]:
        """Measured profile points (``_POINT``'s columns), by batch size, GPU setup and
        limit (highest first); slices in progress are no points yet."""
        query = (
            select(*_POINT)
            .where(_p.job_pk == job_pk, _p.measured_steps.is_(None))
            .order_by(_p.batch_size, _p.gpu_model, _p.gpu_count, _p.power_limit_w.desc())
        )
        if batch_size is not None:
            query = query.where(_p.batch_size == batch_size)
        return [tuple(r) for r in self.conn.execute(query)]

    def profile_points_of(self, sizes: Mapping[int, int]) -> list[tuple[Any, ...]]:
        """The measured profile points of each version's batch size (version key -> size),
        their version key first, in one read."""
        rows = self.conn.execute(
            select(_p.job_pk, *_POINT).where(
                _p.job_pk.in_(list(sizes)),
                _p.batch_size.in_(set(sizes.values())),
                _p.measured_steps.is_(None),
            )
        )
        # Rows unpacked as tuples: a thousand jobs' profiles are thousands of points.
        return [tuple(r) for r in rows if r[1] == sizes[r[0]]]
