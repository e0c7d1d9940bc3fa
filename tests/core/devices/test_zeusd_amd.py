"""AMD GPUs through zeusd: a job learns on them like on NVIDIA ones, and a job that moves from
an NVIDIA node to an AMD one has its runs translated as to another GPU model (paper §7).

Both nodes are fake zeusd daemons (real HTTP servers on tmp Unix sockets) over the fake
NVML, which zeusd presents the same way for NVML and AMD SMI GPUs."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.devices.zeusd import ZeusdGPUs
from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint
from zeus_airflow.core.devices.zeusd_discovery import LocalGPUs
from zeus_airflow.core.reports.arms import profile_points
from zeus_airflow.core.reports.runs import runs
from zeus_airflow.core.store.base import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import A100_SXM4, FakeGPUSpec, FakeNVML, FakeZeusd, ManualClock

MI300X = FakeGPUSpec(model="AMD Instinct MI300X", min_limit_mw=200_000, max_limit_mw=750_000)
A100 = replace(A100_SXM4, default_limit_mw=400_000)
LOG = logging.getLogger("zeus_airflow")


def job() -> JobConfig:
    return JobConfig(
        "moving.train",
        (16, 32, 64),
        64,
        target_metric=1.0,
        max_epochs=2,
        exploration_budget=None,
        profiler=ProfilerConfig(warmup_steps=1, profile_steps=2, warmup_s=0.0, profile_s=0.0),
    )


def train_on(clock: ManualClock):  # type: ignore[no-untyped-def]
    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(4096 // run.batch_size)):
                clock.advance(0.01 * (1 + run.batch_size / 64))  # a larger size: fewer steps
            run.report_metric(1.0)

    return train


def run_on(
    sock: Path, spec: FakeGPUSpec, store: SQLStore, count: int, prefix: str
) -> list[RecurrenceResult]:
    clock = ManualClock()
    results = []
    with FakeZeusd(sock, FakeNVML(1, spec, clock=clock)) as daemon:
        endpoint = ZeusdEndpoint(socket_path=str(sock))
        for i in range(count):
            with PowerLimitGuard(
                ZeusdGPUs((0,), endpoint=endpoint, clock=clock), GPULeases(store), LOG
            ) as guard:
                engine = Engine(store, guard.gpus, job(), seed=3, heartbeat_s=None)
                results.append(
                    engine.run_recurrence(train_on(clock), RecurrenceKey(f"{prefix}-{i}"))
                )
        assert daemon.nvml.limits_mw() == [spec.default_limit_mw or spec.max_limit_mw]
    return results


def test_an_amd_gpu_is_learned_on_and_reported_as_a_gpu_model_of_its_own(tmp_path: Path) -> None:
    store = SQLStore(f"sqlite:///{tmp_path}/zeus.db", create_schema=True)
    on_nvidia = run_on(tmp_path / "nvidia.sock", A100, store, 6, "a100")
    on_amd = run_on(tmp_path / "amd.sock", MI300X, store, 4, "mi300x")

    assert all(r.reached_target and r.measurement == "measured" for r in on_nvidia + on_amd)
    # The NVIDIA node pruned; the AMD node starts from what it learned there: each size's
    # first run on the new model calibrates the translation instead of pruning again.
    assert any(t.phase == "pruning" for r in on_nvidia for t in r.tries)
    amd_phases = [t.phase for r in on_amd for t in r.tries]
    assert "pruning" not in amd_phases and amd_phases[0] == "calibrate"
    # Its limits come from its own range, not the A100's 100..400 W.
    assert {r.power_limit_w for r in on_amd} <= set(range(200, 751))

    with store.reader() as reader:
        shown = runs(reader, on_amd[0].job.id)
        points = profile_points(reader, on_amd[0].job.id)
    assert [r.gpu_model for r in shown] == ["NVIDIA A100-SXM4-40GB"] * 6 + [
        "AMD Instinct MI300X"
    ] * 4
    amd_points = [p for p in points if p.gpu_model == "AMD Instinct MI300X"]
    assert amd_points and max(p.power_limit_w for p in amd_points) == 750
    assert min(p.power_limit_w for p in amd_points) >= 200
    assert {p.gpu_model for p in points} == {"NVIDIA A100-SXM4-40GB", "AMD Instinct MI300X"}


@pytest.mark.parametrize("name", ["AMD Instinct MI250X / MI250", "AMD Radeon PRO W7900"])
def test_the_daemons_name_is_the_model(tmp_path: Path, name: str) -> None:
    with FakeZeusd(tmp_path / "z.sock", FakeNVML(2, replace(MI300X, model=name))) as daemon:
        gpus = ZeusdGPUs(
            endpoint=ZeusdEndpoint(socket_path=str(daemon.socket_path)),
            local=LocalGPUs(pci=frozenset({"0000:11:00.0", "0000:12:00.0"})),
        )
        assert (gpus.model, gpus.count, gpus.power_limit_range_w()) == (name, 2, (200, 750))
