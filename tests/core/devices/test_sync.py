"""Synchronising at measurement windows' edges: a GPU whose work lags behind the host.

``LaggingGPU`` is a fake device that behaves like a CUDA GPU under PyTorch: the host launches
a step and goes on (``host_step_s`` of CPU work per step) while the GPU works through its
queue, one step per ``STEP_TIME_S[limit]``; the power limit applies to whatever runs when it
is set. Without synchronising, the profiler's slices time the host, not the GPU: every limit
looks equally fast and the cheapest-power limit wins. With the hook, each slice waits for its
work and the profile is the GPU's.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

import pytest

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.devices.base import MeasurementKind, candidate_limits_in_range
from zeus_airflow.core.devices.sync import CUDASynchronizer, no_sync
from zeus_airflow.core.store.base import DeviceInfo, RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.monitor import EnergyMonitor
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import ManualClock

STEP_TIME_S = {250: 0.100, 225: 0.102, 200: 0.106, 175: 0.108, 150: 0.130}
"""GPU seconds per step at each limit (W); it draws 90 % of its limit while busy. With eta 0.5
and MAXPOWER 250 W, the cost per step (0.45 p + 125) t is lowest at 175 W."""
TRUE_OPTIMUM_W = 175
HOST_STEP_S = 0.05
"""CPU time per step: the host runs ahead of the GPU, as in GPU-bound training."""
IDLE_W = 60.0
WARMUP_STEPS, PROFILE_STEPS = 10, 40


class LaggingGPU:
    """One GPU whose queued steps run after the host has moved on (a GPUGroup)."""

    measurement: MeasurementKind = "measured"
    model = "NVIDIA Lagging"
    count = 1
    indices = (0,)
    limits_fixed_because: str | None = None

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.limit_w = 250
        self.queued = 0.0
        """Steps launched and not yet done (fractions: the one running)."""
        self._gpu_s = clock()
        self._energy_j = 0.0

    # --- what the training loop does --------------------------------------------------------
    def launch_step(self) -> None:
        self.clock.advance(HOST_STEP_S)
        self._run_until(self.clock())
        self.queued += 1

    # --- the GPUGroup interface -------------------------------------------------------------
    def power_limit_range_w(self) -> tuple[int, int]:
        return min(STEP_TIME_S), max(STEP_TIME_S)

    def candidate_power_limits_w(self) -> tuple[int, ...]:
        return candidate_limits_in_range(*self.power_limit_range_w())

    def get_power_limits_w(self) -> tuple[int, ...]:
        return (self.limit_w,)

    def set_power_limits_w(self, limits_w: tuple[int, ...] | list[int]) -> None:
        self._run_until(self.clock())
        (self.limit_w,) = limits_w

    def energy_j(self) -> float:
        self._run_until(self.clock())
        return self._energy_j

    def now_s(self) -> float:
        return self.clock()

    def energy_update_period_s(self) -> float:
        return 0.0

    def synchronize(self) -> None:
        """Wait (host time passes) until the queue is empty."""
        self.clock.advance(self.queued * STEP_TIME_S[self.limit_w])
        self._run_until(self.clock())

    def close(self) -> None:
        pass

    def drain_s(self) -> float:
        return self.queued * STEP_TIME_S[self.limit_w]

    # --- internals ---------------------------------------------------------------------------
    def _run_until(self, until_s: float) -> None:
        step_s, busy_w = STEP_TIME_S[self.limit_w], 0.9 * self.limit_w
        span_s = until_s - self._gpu_s
        busy_s = min(span_s, self.queued * step_s)
        self.queued = max(0.0, self.queued - busy_s / step_s)
        if self.queued < 1e-9:
            self.queued = 0.0
        self._energy_j += busy_w * busy_s + IDLE_W * (span_s - busy_s)
        self._gpu_s = until_s


def config() -> JobConfig:
    # No budget: what every limit's slice measures is the subject.
    return JobConfig(
        "lagging",
        (32,),
        32,
        target_metric=1.0,
        max_epochs=1,
        profiler=ProfilerConfig(warmup_steps=WARMUP_STEPS, profile_steps=PROFILE_STEPS),
        exploration_budget=None,
    )


def train_on(gpu: LaggingGPU, steps: int) -> Callable[[TrainingRun], None]:
    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(steps)):
                gpu.launch_step()
            run.report_metric(1.0)

    return train


def run_once(synchronize: Callable[[], None] | None) -> tuple[Engine, RecurrenceResult, float]:
    """One recurrence (profiling every limit, then training at the optimum) and the energy
    the GPU really drew over it, queued work included."""
    clock = ManualClock()
    gpu = LaggingGPU(clock)
    engine = Engine(
        SQLStore.in_memory(), gpu, config(), seed=1, heartbeat_s=None, synchronize=synchronize
    )
    start_j = gpu.energy_j()
    result = engine.run_recurrence(train_on(gpu, 400), RecurrenceKey("r1"))
    gpu.synchronize()
    return engine, result, gpu.energy_j() - start_j


def measured_profile(engine: Engine, result: RecurrenceResult) -> dict[int, float]:
    """Seconds per step the stored profile holds for each limit."""
    device = DeviceInfo(LaggingGPU.model, 1, "measured", engine.device_info.power_limits_w)
    profile = engine.store.load_profile(result.job, 32, device)
    return {limit: 1 / m.steps_per_s for limit, m in profile.measurements.items()}


def test_without_synchronising_every_limit_looks_as_fast_as_the_host() -> None:
    engine, result, true_j = run_once(synchronize=no_sync)

    per_step_s = measured_profile(engine, result)
    assert set(per_step_s) == set(STEP_TIME_S)
    # The slices timed the host's launches: the GPU's slowdown at low limits is invisible...
    assert all(seconds == pytest.approx(HOST_STEP_S) for seconds in per_step_s.values())
    # ...so the lowest power limit looks best, and is wrong.
    assert result.power_limit_w == 150 != TRUE_OPTIMUM_W
    # The run ended with work still queued: its energy is missing from the run.
    assert result.energy_j + result.figures.setup_energy_j < 0.8 * true_j


def test_synchronising_attributes_each_slice_to_its_own_limit() -> None:
    engine, result, true_j = run_once(synchronize=None)  # the device's own hook

    per_step_s = measured_profile(engine, result)
    bubble_s = HOST_STEP_S / PROFILE_STEPS  # the first launch of a slice: the GPU waits
    for limit, seconds in per_step_s.items():
        assert seconds == pytest.approx(STEP_TIME_S[limit] + bubble_s, rel=1e-6)
    assert result.power_limit_w == TRUE_OPTIMUM_W
    assert result.energy_j + result.figures.setup_energy_j == pytest.approx(true_j, rel=1e-9)


def test_a_users_own_synchronize_is_called_at_every_window_edge() -> None:
    clock = ManualClock()
    gpu = LaggingGPU(clock)
    calls: list[float] = []

    def mine() -> None:  # e.g. jax.effects_barrier, for a framework other than PyTorch
        calls.append(clock())
        gpu.synchronize()

    monitor = EnergyMonitor(gpu, synchronize=mine)
    monitor.begin_window("w")
    for _ in range(10):
        gpu.launch_step()
    queued_s = gpu.drain_s()
    assert queued_s > 0
    measured = monitor.end_window("w")
    assert len(calls) == 2
    assert measured.time_s == pytest.approx(HOST_STEP_S + 10 * STEP_TIME_S[250])
    assert gpu.queued == 0


class _FakeCuda:
    """torch.cuda as a process that has initialised CUDA sees it (this machine has none)."""

    def __init__(self) -> None:
        self.synchronized: list[int] = []

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def synchronize(self, device: int) -> None:
        self.synchronized.append(device)


def test_cuda_synchronizer_waits_on_the_groups_cuda_devices_only_once_torch_uses_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sync = CUDASynchronizer((1, 0))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    sync()  # torch never imported: nothing to wait for, and torch is not imported by us
    assert "torch" not in sys.modules

    cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    sync()
    assert cuda.synchronized == [1, 0]


def test_cuda_synchronizer_with_the_real_cpu_torch_does_nothing() -> None:
    import torch  # the dev install has the CPU build

    assert not torch.cuda.is_available()
    CUDASynchronizer((0,))()  # no CUDA: returns at once, no error
