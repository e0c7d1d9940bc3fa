"""The ``device`` strings and the simulated GPU (real steps, a measured power curve)."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pynvml
import pytest
from fixtures_airflow import TRACES

from zeus_airflow.core.common.config import ConfigError, JobConfig, ProfilerConfig
from zeus_airflow.core.common.cost import zeus_cost
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices import nvml
from zeus_airflow.core.devices.base import DeviceError
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.simulated import SimulatedGPU
from zeus_airflow.core.devices.spec import DeviceSpec, open_device, parse_device
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import FakeNVML, ManualClock


@pytest.fixture(scope="module")
def cifar() -> WorkloadTrace:
    return load_workload_trace(TRACES, "v100", "cifar100")


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("auto", DeviceSpec("nvml")),
        ("nvml:2,0", DeviceSpec("nvml", indices=(2, 0))),
        ("amdsmi:1", DeviceSpec("amdsmi", indices=(1,))),
        ("zeusd:3", DeviceSpec("zeusd", indices=(3,))),
        ("replay:a40:squad", DeviceSpec("replay", gpu="a40", workload="squad")),
        ("simulated:v100", DeviceSpec("simulated", gpu="v100", workload="cifar100")),
        ("simulated:a40:imagenet", DeviceSpec("simulated", gpu="a40", workload="imagenet")),
    ],
)
def test_device_strings(text: str, spec: DeviceSpec) -> None:
    assert parse_device(text) == spec


def test_replay_and_simulated_devices_open_on_the_traces() -> None:
    replay = open_device(parse_device("replay:v100:librispeech"), TRACES)
    simulated = open_device(parse_device("simulated:a40"), TRACES)
    assert isinstance(replay, ReplayGPU) and replay.measurement == "replayed"
    assert isinstance(simulated, SimulatedGPU) and simulated.measurement == "simulated"
    assert simulated.model == "A40 (simulated)"
    # The operator's parameter is device=, so the error names it (it once said "gpu='h100'",
    # a parameter the operator does not have).
    for text in ("simulated:h100", "replay:h100:squad"):
        with pytest.raises(
            ConfigError,
            match=r"device='\w+:h100\.\.\.' is invalid: no power "
            r"traces for GPU 'h100'; expected one of a40, v100",
        ):
            open_device(parse_device(text), TRACES)


def test_traces_come_from_the_argument_the_environment_or_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ZEUS_TRACES_DIR", str(tmp_path))  # no traces there: a clear error
    with pytest.raises(ConfigError, match=f"traces={str(tmp_path)!r} is invalid"):
        open_device(parse_device("replay:v100:squad"))
    assert open_device(parse_device("replay:v100:squad"), TRACES).measurement == "replayed"
    monkeypatch.delenv("ZEUS_TRACES_DIR")
    assert open_device(parse_device("simulated:a40")).measurement == "simulated"


@pytest.mark.parametrize(
    ("fake", "message"),
    [
        (FakeNVML(0), "no GPU is visible"),
        (FakeNVML(1, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), "cannot initialise NVML"),
    ],
    ids=["no_gpu", "no_driver"],
)
def test_auto_without_a_gpu_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, fake: FakeNVML, message: str
) -> None:
    monkeypatch.setattr(nvml, "NVMLGPUs", functools.partial(nvml.NVMLGPUs, nvml=fake))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(DeviceError, match=message):
        open_device(parse_device("auto"))


def test_simulated_time_and_energy_follow_the_power_curve(cifar: WorkloadTrace) -> None:
    clock = ManualClock()
    gpu = SimulatedGPU(cifar, clock=clock)
    b0, top = cifar.default_batch_size, max(cifar.power_limits_w)
    at_top, at_100 = cifar.epochs[(b0, top)], cifar.epochs[(b0, 100)]

    clock.advance(10.0)  # 10 real s at the maximum limit
    gpu.set_power_limits_w([100])
    clock.advance(10.0)  # 10 real s capped at 100 W
    slowdown = at_100.time_s / at_top.time_s

    assert gpu.now_s() == pytest.approx(10.0 + 10.0 * slowdown)
    assert gpu.energy_j() == pytest.approx(
        at_top.avg_power_w * 10.0 + at_100.avg_power_w * 10.0 * slowdown
    )
    assert slowdown > 1.4  # the curve has a real trade-off
    assert gpu.source == "summary_power_v100.csv, cifar100 at batch size 1024"


def test_simulated_time_is_the_processs_own_work_not_the_hosts_wall_clock(
    cifar: WorkloadTrace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting (another process's load, a sleep) is no GPU time; work is. The wall clock,
    with its noise, is an explicit choice."""
    gpu = SimulatedGPU(cifar)
    start = gpu.now_s()
    time.sleep(0.3)
    waited = gpu.now_s() - start
    busy_until = time.process_time() + 0.2
    while time.process_time() < busy_until:
        pass
    worked = gpu.now_s() - start - waited
    assert waited < 0.05 and worked >= 0.2
    monkeypatch.setenv("ZEUS_SIMULATED_CLOCK", "wall")
    for wall in (SimulatedGPU(cifar, clock=time.monotonic), SimulatedGPU(cifar)):
        start = wall.now_s()
        time.sleep(0.3)
        assert wall.now_s() - start >= 0.3
    monkeypatch.setenv("ZEUS_SIMULATED_CLOCK", "gpu")
    with pytest.raises(
        DeviceError, match="ZEUS_SIMULATED_CLOCK='gpu' is invalid: expected one of cpu, wall"
    ):
        SimulatedGPU(cifar)


def test_simulated_limits_are_checked(cifar: WorkloadTrace) -> None:
    gpu = SimulatedGPU(cifar, count=2)
    with pytest.raises(DeviceError, match="outside"):
        gpu.set_power_limits_w([50, 50])
    with pytest.raises(DeviceError, match="one limit"):
        gpu.set_power_limits_w([100, 150])
    with pytest.raises(DeviceError, match="batch_size=7"):
        SimulatedGPU(cifar, batch_size=7)


def test_the_profiler_finds_the_curves_optimum_on_a_simulated_gpu(
    cifar: WorkloadTrace, tmp_path: Path
) -> None:
    clock = ManualClock()
    gpu = SimulatedGPU(cifar, clock=clock)
    config = JobConfig(
        "simulated.job",
        (32, 64),
        64,
        1.0,
        3,
        profiler=ProfilerConfig(warmup_steps=2, profile_steps=5),
    )

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(200)):
                clock.advance(0.05)  # every real step takes 50 ms
            run.report_metric(1.0)

    store = SQLStore(f"sqlite:///{tmp_path}/zeus.db", create_schema=True)
    result = Engine(store, gpu, config, seed=1, heartbeat_s=None).run_recurrence(
        train, RecurrenceKey("run-1")
    )

    top = max(cifar.power_limits_w)
    expected = min(
        cifar.power_limits_w,
        key=lambda p: zeus_cost(gpu.power_w(p) * gpu.slowdown(p), gpu.slowdown(p), 0.5, top),
    )
    assert result.power_limit_w == expected < top
    assert result.measurement == "simulated"


@pytest.mark.usefixtures("dag_test")
def test_a_zeusd_unreachable_at_start_trains_measuring_only(
    zeus_store_url: str,
    fake_gpus: FakeNVML,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The first rule: zeusd not running as the task starts fails nothing. The task reads its
    GPU through NVML, changes no limit, trains and succeeds, and says why in its log."""
    from fixtures_airflow import daily, task_state, xcoms
    from test_operator import fake_dag, train_steps

    monkeypatch.setenv("ZEUSD_SOCK_PATH", str(tmp_path / "zeusd-not-started.sock"))
    dag = fake_dag("zeusd_unreachable", lambda run: train_steps(run, 20))
    dag_run = dag.test(logical_date=daily(0))

    assert task_state(dag_run, "train") == ("success", 1)
    pushed = xcoms("zeusd_unreachable", dag_run.run_id, "train")
    assert pushed["power_control"] == "none" and pushed["measurement"] == "measured"
    assert fake_gpus.set_calls == []  # the fake would have let it: nothing was tried
    log = capfd.readouterr().out
    assert "zeusd-not-started.sock cannot be reached" in log
    assert "This task measures only, through NVML (read-only)" in log
