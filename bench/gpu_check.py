"""A self-contained check of zeus-airflow's measurement on one real NVIDIA GPU.

For a GPU node that has PyTorch with CUDA and nvidia-ml-py but neither Airflow nor network
access. It imports only the Airflow-free core (``zeus_airflow.core``) from this checkout, so
besides torch and nvidia-ml-py it needs these wheels (pure Python or with wheels for every
platform; copy them over and ``pip install --no-index``): SQLAlchemy, alembic (with Mako and
MarkupSafe), numpy and psutil. It never imports Airflow.

It NEVER changes a GPU setting: no power limit, clock, persistence mode, MIG layout or reset.
NVML is reached only through :class:`ReadOnlyNVML`, which refuses every NVML function that
changes something before NVML sees it, and the engine runs in ``measure`` mode. The report
says how many changes were attempted (always 0).

Within 8 minutes on one modern GPU it writes ``gpu_check.json`` and ``gpu_check.md`` to
``--out`` with (format: docs/devices.md, "bench/gpu_check.py"):

1. the inventory: model, driver, power-limit constraints, current and default limit, energy
   counter support, MIG mode, and whether setting a limit would be permitted as far as NVML
   and the process's privileges tell, without trying;
2. the energy counter against power sampled and integrated over the same windows (% agreement),
   and the monitor's overhead per window begin and end (µs);
3. the effect of synchronising at window edges: per-step time and energy with and without;
4. a ResNet-style CNN on synthetic images and a small transformer on synthetic tokens, each at
   four batch sizes: time and energy per step and per epoch, samples per joule, GPU and
   CPU/DRAM (RAPL) energy apart;
5. an engine run of at least 10 recurrences of a real job (an MLP on synthetic clusters, to a
   target accuracy) in measure mode with the SQLite store: what the bandit chose, measured.

``--zeusd`` (a node where zeusd runs: ``ZEUSD_SOCK_PATH`` or ``ZEUSD_HOST_PORT``, and
``ZEUSD_TOKEN`` if it asks for one) also reads the GPU through the daemon: what it offers and
this process's scopes, its energy against NVML's counter over the same windows, the cost of a
reading through it, CPU/DRAM energy from its ``/cpu`` group; the workloads and the engine run
then measure through zeusd. Still measure only: the daemon is reached through a client that
refuses every POST (every change) before it is sent, and the report counts the attempts
(always 0).

``--simulated`` runs the same code on the CPU against the fake NVML (and, where the host's
RAPL is unreadable, a fake powercap tree): every figure is then labelled simulated. The test
suite runs it that way with ``--quick`` (tests/test_gpu_check.py).

    python bench/gpu_check.py --out gpu_check_results            # on the GPU node
    python bench/gpu_check.py --simulated --quick --out /tmp/gc   # anywhere, seconds
    python bench/gpu_check.py --zeusd --out gpu_check_zeusd       # on a node with zeusd
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout, not an installed package
    sys.path.insert(0, str(REPO))

BUDGET_S = 420.0
"""Default time budget: the whole check ends well within 8 minutes."""


# --- sizes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    """How big each part is; ``--quick`` shrinks them to seconds on a CPU."""

    image_px: int = 64
    cnn_width: int = 64
    cnn_batch_sizes: tuple[int, ...] = (32, 64, 128, 256)
    cnn_epoch_samples: int = 50_000
    seq_len: int = 256
    vocab: int = 8_000
    d_model: int = 512
    layers: int = 4
    tf_batch_sizes: tuple[int, ...] = (8, 16, 32, 64)
    tf_epoch_samples: int = 20_000
    warmup_steps: int = 10
    measured_steps: int = 30
    counter_windows: int = 8
    counter_window_s: float = 2.0
    spread_window_s: tuple[float, ...] = (0.15, 0.5, 2.0)
    """Window lengths whose power spread is compared (0.15 s: profile_s's default)."""
    overhead_iterations: int = 2_000
    sync_windows: int = 5
    sync_steps: int = 20
    bookmark_steps: int = 400
    recurrences: int = 12
    job_samples: int = 400_000
    """Enough that a run spans many updates of the energy counter (0.1 s on an H200)."""
    job_features: int = 64
    job_batch_sizes: tuple[int, ...] = (64, 128, 256, 512)
    job_max_epochs: int = 6


QUICK = Sizes(
    image_px=16,
    cnn_width=8,
    cnn_batch_sizes=(4, 8, 16, 32),
    cnn_epoch_samples=512,
    seq_len=16,
    vocab=64,
    d_model=32,
    layers=1,
    tf_batch_sizes=(4, 8, 16, 32),
    tf_epoch_samples=512,
    warmup_steps=1,
    measured_steps=3,
    counter_windows=3,
    counter_window_s=0.2,
    spread_window_s=(0.02, 0.05),
    overhead_iterations=200,
    sync_windows=3,
    sync_steps=3,
    bookmark_steps=5,
    recurrences=10,
    job_samples=1_024,
    job_features=8,
    job_batch_sizes=(16, 32, 64, 128),
    job_max_epochs=4,
)


# --- NVML, read only --------------------------------------------------------------------------
_CHANGES = re.compile(r"nvml\w*?(Set|Reset|Clear|Create|Destroy|Register)[A-Z_]")


class SettingRefusedError(RuntimeError):
    """gpu_check attempted an NVML call that changes the GPU: a bug, refused before NVML."""


class ReadOnlyNVML:
    """The NVML module with every function that changes something refused.

    nvmlInit and nvmlShutdown pass (they change no setting); so do constants and error
    classes. Attempts are counted in :attr:`attempted`, and the report shows them.
    """

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.attempted: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if _CHANGES.match(name):

            def refuse(*_args: Any, **_kwargs: Any) -> None:
                self.attempted.append(name)
                raise SettingRefusedError(f"gpu_check never changes a GPU setting: {name} refused")

            return refuse
        return getattr(self._nvml, name)


def nvml_index(nvml: Any, cuda_gpu: int, prog: str) -> int:
    """The NVML index of CUDA device number ``cuda_gpu`` (as CUDA numbers the visible GPUs);
    exits with the option's error when there is none."""
    from zeus_airflow.core.devices.nvml import visible_gpus

    every = visible_gpus(nvml=nvml)
    try:
        if not 0 <= cuda_gpu < every.count:
            raise SystemExit(
                f"{prog}: --gpu={cuda_gpu} is invalid: expected a CUDA device number in "
                f"[0, {every.count - 1}]"
            )
        return every.indices[cuda_gpu]
    finally:
        every.close()


# --- zeusd, read only -------------------------------------------------------------------------
def read_only_zeusd(endpoint: Any) -> Any:
    """A zeusd client that refuses every POST (zeusd's writes: limits, clocks, persistence)
    before it is sent; attempts are kept in ``attempted``."""
    from zeus_airflow.core.devices.zeusd_client import ZeusdClient

    class ReadOnlyZeusd(ZeusdClient):
        def __init__(self, endpoint: Any) -> None:
            super().__init__(endpoint)
            self.attempted: list[str] = []

        def post(self, path: str, **params: object) -> Any:
            self.attempted.append(path)
            raise SettingRefusedError(f"gpu_check never changes a GPU setting: POST {path} refused")

    return ReadOnlyZeusd(endpoint)


@dataclass
class ZeusdSide:
    """The checked GPU through zeusd, the host's energy from its /cpu group (None without
    cpu-read), and the read-only client."""

    gpus: Any
    host: Any
    client: Any


def open_zeusd(endpoint: Any, gpu_id: int) -> ZeusdSide:
    from zeus_airflow.core.devices.zeusd import ZeusdGPUs, ZeusdHostEnergy

    client = read_only_zeusd(endpoint)
    gpus = ZeusdGPUs((gpu_id,), client=client)
    host = ZeusdHostEnergy(client, gpus.discovery)
    return ZeusdSide(gpus, host if host.available else None, client)


def zeusd_checks(
    zeusd: ZeusdSide, nvml_gpus: Any, sizes: Sizes, load: Callable[[], None]
) -> dict[str, Any]:
    """What the daemon offers, and its energy against NVML's over the same windows."""
    from zeus_airflow.core.devices.zeusd_client import CPU_READ, GPU_CONTROL, GPU_READ
    from zeus_airflow.core.train.monitor import EnergyMonitor

    found, gpus = zeusd.gpus.discovery, zeusd.gpus
    by_zeusd, by_nvml = EnergyMonitor(gpus), EnergyMonitor(nvml_gpus)
    windows = []
    for _ in range(sizes.counter_windows):
        by_zeusd.begin_window("w")
        by_nvml.begin_window("w")
        end_s = time.monotonic() + sizes.counter_window_s
        while time.monotonic() < end_s:
            load()
        z, n = by_zeusd.end_window("w"), by_nvml.end_window("w")
        windows.append(
            {
                "time_s": z.time_s,
                "zeusd_j": z.energy_j,
                "nvml_j": n.energy_j,
                "agreement_pct": 100.0 * (1 - abs(z.energy_j - n.energy_j) / n.energy_j)
                if n.energy_j > 0
                else float("nan"),
            }
        )
    return {
        "endpoint": found.endpoint.where,
        "gpus": [asdict(g) for g in found.gpus],
        "enabled_api_groups": sorted(found.enabled_groups),
        "auth_required": found.auth_required,
        "scopes": sorted(found.scopes),
        "checked_gpu": {
            "id": gpus.indices[0],
            "model": gpus.model,
            "power_limit_range_w": list(gpus.power_limit_range_w()),
            "power_limit_w": gpus.get_power_limits_w()[0],
            "energy_source": gpus.energy_source,
        },
        "why_not": {group: found.why_not(group) for group in (GPU_READ, GPU_CONTROL, CPU_READ)},
        "setting_a_limit_permitted": "likely" if found.why_not(GPU_CONTROL) is None else "no",
        "windows": windows,
        "agreement_pct_median": statistics.median(w["agreement_pct"] for w in windows),
        "monitor_overhead_us": monitor_overhead(by_zeusd, sizes.overhead_iterations),
        "cpu_read": zeusd.host is not None,
    }


# --- the inventory ----------------------------------------------------------------------------
def _try(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as err:  # NVML answers NOT_SUPPORTED for a lot: report, go on
        return f"unavailable ({err})"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _has_cap_sys_admin() -> bool | None:
    """From /proc/self/status (bit 21 of CapEff); None off Linux."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(r"^CapEff:\s*([0-9a-f]+)$", status, re.M)
    return None if match is None else bool(int(match.group(1), 16) >> 21 & 1)


def inventory(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    constraints = _try(lambda: nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle))
    mig = _try(lambda: nvml.nvmlDeviceGetMigMode(handle))
    counter = _try(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
    privileged = os.geteuid() == 0 or bool(_has_cap_sys_admin())
    mig_on = isinstance(mig, list | tuple) and mig[0] == nvml.NVML_DEVICE_MIG_ENABLE
    ranged = isinstance(constraints, list | tuple) and constraints[0] < constraints[1]
    reasons = []
    if not privileged:
        reasons.append("the process is neither root nor holds CAP_SYS_ADMIN")
    if mig_on:
        reasons.append("MIG is enabled: limits belong to the whole GPU, shared by instances")
    if not ranged:
        reasons.append(f"no range to choose from (constraints {constraints})")
    return {
        "nvml_index": index,
        "model": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "driver": _text(_try(nvml.nvmlSystemGetDriverVersion)),
        "architecture": _try(lambda: nvml.nvmlDeviceGetArchitecture(handle)),
        "power_limit_constraints_mw": constraints,
        "power_limit_mw": _try(lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle)),
        "default_power_limit_mw": _try(
            lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)
        ),
        "enforced_power_limit_mw": _try(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle)),
        "power_usage_mw": _try(lambda: nvml.nvmlDeviceGetPowerUsage(handle)),
        "energy_counter": isinstance(counter, int),
        "mig_mode": mig if not isinstance(mig, str) else "not supported",
        "privileged": privileged,
        "setting_a_limit_permitted": "likely" if not reasons else "no",
        "why_not": reasons,
    }


# --- workloads (torch) ------------------------------------------------------------------------
def resnet_cnn(torch: Any, width: int, classes: int = 10) -> Any:
    """A small ResNet: a stem and three residual blocks (``width``, 2x and 4x channels, the
    last two at stride 2), global average pooling, a linear head (bench/gpu_recurring.py
    trains it too)."""
    nn = torch.nn

    class Block(nn.Module):  # type: ignore[name-defined]
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.skip = (
                nn.Identity()
                if stride == 1 and cin == cout
                else nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )
            )

        def forward(self, x: Any) -> Any:
            return torch.relu(self.body(x) + self.skip(x))

    return nn.Sequential(
        nn.Conv2d(3, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        Block(width, width, 1),
        Block(width, 2 * width, 2),
        Block(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    )


def _transformer(torch: Any, sizes: Sizes) -> Any:
    nn = torch.nn

    class TinyLM(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(sizes.vocab, sizes.d_model)
            layer = nn.TransformerEncoderLayer(
                sizes.d_model, max(1, sizes.d_model // 64), 4 * sizes.d_model, batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, sizes.layers, enable_nested_tensor=False)
            self.head = nn.Linear(sizes.d_model, sizes.vocab)

        def forward(self, tokens: Any) -> Any:
            mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1]).to(tokens.device)
            return self.head(self.encoder(self.embed(tokens), mask=mask, is_causal=True))

    return TinyLM()


def make_step(
    torch: Any, kind: str, sizes: Sizes, batch_size: int, device: str
) -> Callable[[], None]:
    """One optimisation step on synthetic data; no host sync inside (as real loops aim)."""
    torch.manual_seed(0)
    if kind == "cnn":
        model = resnet_cnn(torch, sizes.cnn_width).to(device)
        x = torch.randn(batch_size, 3, sizes.image_px, sizes.image_px, device=device)
        y = torch.randint(0, 10, (batch_size,), device=device)

        def loss() -> Any:
            return torch.nn.functional.cross_entropy(model(x), y)
    else:
        model = _transformer(torch, sizes).to(device)
        tokens = torch.randint(0, sizes.vocab, (batch_size, sizes.seq_len + 1), device=device)

        def loss() -> Any:
            logits = model(tokens[:, :-1])
            return torch.nn.functional.cross_entropy(
                logits.reshape(-1, sizes.vocab), tokens[:, 1:].reshape(-1)
            )

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    return step


# --- measurements -----------------------------------------------------------------------------
def _window(monitor: Any, name: str, step: Callable[[], None], steps: int) -> Any:
    """``steps`` calls of ``step`` in one measurement window."""
    monitor.begin_window(name)
    for _ in range(steps):
        step()
    return monitor.end_window(name)


def counter_vs_sampling(
    nvml: Any, index: int, sizes: Sizes, load: Callable[[], None], clock: Callable[[], float]
) -> dict[str, Any]:
    """The same windows measured by the energy counter and by power sampled every 10 ms."""
    from zeus_airflow.core.devices.nvml import NVMLGPUs
    from zeus_airflow.core.train.monitor import EnergyMonitor
    from zeus_airflow.core.train.profiler import SLICE_COUNTER_UPDATES

    counter = NVMLGPUs([index], nvml=nvml, clock=clock)
    sampled = NVMLGPUs(
        [index], nvml=nvml, clock=clock, energy_source="sampling", sample_interval_s=0.01
    )
    try:
        if counter.energy_source != "counter":
            return {
                "energy_counter": False,
                "note": "no energy counter (before Volta): "
                "energy is sampled power, integrated; nothing to compare",
            }
        by_counter, by_sampling = EnergyMonitor(counter), EnergyMonitor(sampled)
        windows = []
        for _ in range(sizes.counter_windows):
            by_counter.begin_window("w")
            by_sampling.begin_window("w")
            end_s = clock() + sizes.counter_window_s
            while clock() < end_s:
                load()
            c, s = by_counter.end_window("w"), by_sampling.end_window("w")
            agreement = (
                100.0 * (1 - abs(c.energy_j - s.energy_j) / c.energy_j)
                if c.energy_j > 0
                else float("nan")
            )
            windows.append(
                {
                    "time_s": c.time_s,
                    "counter_j": c.energy_j,
                    "sampled_j": s.energy_j,
                    "agreement_pct": agreement,
                }
            )
        overhead = monitor_overhead(by_counter, sizes.overhead_iterations)
        read_costs = read_costs_us(nvml, index, counter, by_counter, sizes.overhead_iterations)
        periods_s = update_periods_s(nvml, index, sizes.counter_windows, clock)
        spread = power_spread_by_window(by_counter, load, clock, sizes)
        return {
            "power_spread_by_window": spread,
            "energy_counter": True,
            "update_periods_s": periods_s,
            "update_period_s_median": statistics.median(periods_s),
            "slice_counter_updates": SLICE_COUNTER_UPDATES,
            "profile_slice_min_s": SLICE_COUNTER_UPDATES * statistics.median(periods_s),
            "sample_interval_s": 0.01,
            "windows": windows,
            "agreement_pct_median": statistics.median(w["agreement_pct"] for w in windows),
            "agreement_pct_min": min(w["agreement_pct"] for w in windows),
            "monitor_overhead_us": overhead,
            "read_costs_us": read_costs,
            "monitor_overhead_us_sampling": monitor_overhead(
                by_sampling, sizes.overhead_iterations
            ),
        }
    finally:
        counter.close()
        sampled.close()


def power_spread_by_window(
    monitor: Any, load: Callable[[], None], clock: Callable[[], float], sizes: Sizes
) -> list[dict[str, float]]:
    """Average power (W) over back-to-back windows of a few lengths under the same steady load:
    its spread across windows of one length is what a profile slice of that length reads as
    noise (the counter's whole updates, mostly, on short windows)."""
    rows = []
    for length_s in sizes.spread_window_s:
        powers_w = []
        for _ in range(sizes.counter_windows):
            monitor.begin_window("spread")
            end_s = clock() + length_s
            while clock() < end_s:
                load()
            measured = monitor.end_window("spread")
            powers_w.append(measured.energy_j / measured.time_s)
        mean_w = statistics.mean(powers_w)
        rows.append(
            {
                "window_s": length_s,
                "mean_w": mean_w,
                "spread_pct": 100.0 * statistics.stdev(powers_w) / mean_w if mean_w else 0.0,
                "range_pct": 100.0 * (max(powers_w) - min(powers_w)) / mean_w if mean_w else 0.0,
            }
        )
    return rows


def update_periods_s(nvml: Any, index: int, probes: int, clock: Callable[[], float]) -> list[float]:
    """How often the energy counter advances (s), probed ``probes`` times: a window only a few
    updates long reads whole updates, so the profiler's slices span at least
    ``SLICE_COUNTER_UPDATES`` of them."""
    from zeus_airflow.core.devices.energy import probe_update_period_s

    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    return [
        probe_update_period_s(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle), clock)
        for _ in range(probes)
    ]


def read_costs_us(
    nvml: Any, index: int, gpus: Any, monitor: Any, iterations: int
) -> dict[str, float]:
    """Median µs of each part of a window's edge, apart: one NVML energy reading, one power
    reading, synchronising an idle GPU, and the profiler's per-step bookmark (a window read
    without synchronising)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    parts: dict[str, Callable[[], Any]] = {
        "nvml_energy_read": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
        "nvml_power_read": lambda: nvml.nvmlDeviceGetPowerUsage(handle),
        "synchronize": gpus.synchronize,
    }
    costs = {}
    for name, call in parts.items():
        samples = []
        for _ in range(iterations):
            t0 = time.perf_counter_ns()
            call()
            samples.append((time.perf_counter_ns() - t0) / 1000)
        costs[name] = statistics.median(samples)
    monitor.begin_window("bookmark")
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        monitor.peek_window("bookmark", synchronize=False)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    monitor.cancel_window("bookmark")
    costs["step_bookmark"] = statistics.median(samples)
    return costs


def monitor_overhead(monitor: Any, iterations: int) -> dict[str, float]:
    """Median and p90 µs of begin_window and end_window (synchronising included)."""
    begins, ends = [], []
    for i in range(iterations):
        name = f"overhead{i}"
        t0 = time.perf_counter_ns()
        monitor.begin_window(name)
        t1 = time.perf_counter_ns()
        monitor.end_window(name)
        t2 = time.perf_counter_ns()
        begins.append((t1 - t0) / 1000)
        ends.append((t2 - t1) / 1000)
    return {
        "begin_median_us": statistics.median(begins),
        "begin_p90_us": _p90(begins),
        "end_median_us": statistics.median(ends),
        "end_p90_us": _p90(ends),
    }


def _p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def synchronisation_effect(
    gpus: Any, step: Callable[[], None], sizes: Sizes, host: Any
) -> dict[str, Any]:
    from zeus_airflow.core.devices.sync import no_sync
    from zeus_airflow.core.train.monitor import EnergyMonitor

    result = {}
    for label, sync in (("without", no_sync), ("with", None)):
        monitor = EnergyMonitor(gpus, synchronize=sync, host=host)
        for _ in range(sizes.warmup_steps):
            step()
        gpus.synchronize()
        per_step_s, per_step_j = [], []
        for _ in range(sizes.sync_windows):
            m = _window(monitor, "sync", step, sizes.sync_steps)
            per_step_s.append(m.time_s / sizes.sync_steps)
            per_step_j.append(m.energy_j / sizes.sync_steps)
        gpus.synchronize()
        result[label] = {
            "time_per_step_s": _spread(per_step_s),
            "energy_per_step_j": _spread(per_step_j),
        }
    return result


def bookmark_cost(gpus: Any, step: Callable[[], None], sizes: Sizes) -> dict[str, float]:
    """Seconds per training step (mean over ``bookmark_steps``, synchronised at the end) with
    no bookmark, with an energy reading at every step (the profiler before the H200's check)
    and with the clock every step and energy once per counter update (the profiler now)."""
    from zeus_airflow.core.train.monitor import EnergyMonitor

    monitor, period_s = EnergyMonitor(gpus), gpus.energy_update_period_s()

    def every_step() -> None:
        monitor.peek_window("bookmark", synchronize=False)

    last_s = [0.0]

    def once_per_update() -> None:
        elapsed_s = monitor.peek_time_s("bookmark")
        if period_s == 0 or elapsed_s - last_s[0] >= period_s:
            last_s[0] = monitor.peek_window("bookmark", synchronize=False).time_s

    result = {}
    for label, bookmark in (
        ("none", lambda: None),
        ("energy_every_step", every_step),
        ("energy_once_per_update", once_per_update),
    ):
        gpus.synchronize()
        monitor.begin_window("bookmark")
        start_s = time.perf_counter()
        for _ in range(sizes.bookmark_steps):
            step()
            bookmark()
        gpus.synchronize()
        result[label] = (time.perf_counter() - start_s) / sizes.bookmark_steps
        monitor.cancel_window("bookmark")
    return result


def _spread(values: list[float]) -> dict[str, float]:
    mean = statistics.fmean(values)
    return {
        "mean": mean,
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "cv_pct": 100 * statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0,
    }


def train_at_batch_sizes(
    torch: Any, gpus: Any, host: Any, kind: str, sizes: Sizes, device: str, deadline_s: float
) -> list[dict[str, Any]]:
    from zeus_airflow.core.train.monitor import EnergyMonitor

    monitor = EnergyMonitor(gpus, host=host)
    batch_sizes = sizes.cnn_batch_sizes if kind == "cnn" else sizes.tf_batch_sizes
    epoch_samples = sizes.cnn_epoch_samples if kind == "cnn" else sizes.tf_epoch_samples
    rows = []
    for batch_size in batch_sizes:
        if time.monotonic() > deadline_s:
            rows.append({"model": kind, "batch_size": batch_size, "skipped": "time budget spent"})
            continue
        try:
            step = make_step(torch, kind, sizes, batch_size, device)
            for _ in range(sizes.warmup_steps):
                step()
            m = _window(monitor, kind, step, sizes.measured_steps)
        except RuntimeError as err:  # out of memory at a large batch: reported, not fatal
            rows.append({"model": kind, "batch_size": batch_size, "skipped": str(err)[:200]})
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            continue
        n = sizes.measured_steps
        steps_per_epoch = math.ceil(epoch_samples / batch_size)
        host_j = (m.cpu_energy_j or 0.0) + (m.dram_energy_j or 0.0)
        rows.append(
            {
                "model": kind,
                "batch_size": batch_size,
                "steps_measured": n,
                "time_per_step_s": m.time_s / n,
                "gpu_energy_per_step_j": m.energy_j / n,
                "cpu_energy_per_step_j": None if m.cpu_energy_j is None else m.cpu_energy_j / n,
                "dram_energy_per_step_j": None if m.dram_energy_j is None else m.dram_energy_j / n,
                "avg_gpu_power_w": m.avg_power_w,
                "epoch_samples": epoch_samples,
                "steps_per_epoch": steps_per_epoch,
                "time_per_epoch_s": m.time_s / n * steps_per_epoch,
                "gpu_energy_per_epoch_j": m.energy_j / n * steps_per_epoch,
                "samples_per_gpu_j": batch_size * n / m.energy_j if m.energy_j > 0 else None,
                "samples_per_j_with_host": batch_size * n / (m.energy_j + host_j)
                if m.cpu_energy_j is not None
                else None,
            }
        )
    return rows


def engine_run(
    torch: Any, gpus: Any, host: Any, sizes: Sizes, device: str, store_path: Path, deadline_s: float
) -> dict[str, Any]:
    """Recurrences of a real job (an MLP on synthetic clusters, to 90 % accuracy) in measure
    mode on the SQLite store: the bandit's choices and what each measured."""
    from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
    from zeus_airflow.core.store.base import RecurrenceKey
    from zeus_airflow.core.store.sql import SQLStore
    from zeus_airflow.core.train.engine import Engine

    config = JobConfig(
        "gpu_check.mlp",
        sizes.job_batch_sizes,
        sizes.job_batch_sizes[-1],
        target_metric=0.9,
        max_epochs=sizes.job_max_epochs,
        profiler=ProfilerConfig(mode="measure"),
    )
    store = SQLStore(f"sqlite:///{store_path}", create_schema=True)
    engine = Engine(store, gpus, config, seed=1, heartbeat_s=None, host_energy=host)
    rows = []
    for recurrence in range(sizes.recurrences):
        if time.monotonic() > deadline_s and recurrence >= 10:
            break
        result = engine.run_recurrence(
            _mlp_job(torch, sizes, device, seed=recurrence),
            RecurrenceKey(run_id=f"recurrence-{recurrence:02d}"),
        )
        rows.append(
            {
                "recurrence": recurrence + 1,
                "tries": len(result.tries),
                "batch_size": result.batch_size,
                "phase": result.final.phase,
                "power_limit_w": result.power_limit_w,
                "epochs": result.epochs,
                "reached_target": result.reached_target,
                "energy_j": result.energy_j,
                "time_s": result.time_s,
                "cost": result.cost,
                "tried": [t.outcome.batch_size for t in result.tries],
            }
        )
        progress(
            f"engine recurrence {recurrence + 1}: batch size {result.batch_size} "
            f"({result.final.phase}), {result.energy_j:.1f} J"
        )
    store.engine.dispose()
    chosen = [r["batch_size"] for r in rows]
    return {
        "job": config.job_id,
        "mode": "measure",
        "store": "sqlite",
        "batch_sizes": list(config.batch_sizes),
        "recurrences": rows,
        "most_chosen_batch_size": max(set(chosen), key=chosen.count) if chosen else None,
        "last_five_batch_sizes": chosen[-5:],
    }


def _mlp_job(torch: Any, sizes: Sizes, device: str, seed: int) -> Callable[[Any], None]:
    def train(run: Any) -> None:
        generator = torch.Generator(device=device).manual_seed(seed)
        centres = torch.randn(4, sizes.job_features, generator=generator, device=device) * 1.5
        y = torch.randint(0, 4, (sizes.job_samples,), generator=generator, device=device)
        x = centres[y] + torch.randn(
            sizes.job_samples, sizes.job_features, generator=generator, device=device
        )
        split = sizes.job_samples * 4 // 5
        model = torch.nn.Sequential(
            torch.nn.Linear(sizes.job_features, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
        ).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in run.epochs():
            order = torch.randperm(split, generator=generator, device=device)
            for batch in run.steps(order.split(run.batch_size)):
                optimizer.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                optimizer.step()
            with torch.no_grad():
                accuracy = (model(x[split:]).argmax(1) == y[split:]).float().mean().item()
            run.report_metric(accuracy)

    return train


# --- simulated host energy --------------------------------------------------------------------
class _SimulatedPowercap:
    """A fake powercap tree whose package draws 65 W and DRAM 8 W while it runs."""

    def __init__(self, root: Path) -> None:
        from zeus_airflow.testing.fake_sysfs import FakePowercap

        self.tree = FakePowercap(root)
        self.tree.zone("intel-rapl:0", "package-0", 262_143_328_850)
        self.tree.zone("intel-rapl:0:0", "dram", 65_712_999_613)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.02):
            now = time.monotonic()
            self.tree.add("intel-rapl:0", round(65e6 * (now - last)))
            self.tree.add("intel-rapl:0:0", round(8e6 * (now - last)))
            last = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# --- the report -------------------------------------------------------------------------------
def progress(text: str, prog: str = "gpu_check") -> None:
    print(f"[{prog}] {text}", file=sys.stderr, flush=True)


def fmt(value: Any, digits: int = 4, missing: str = "not measured") -> str:
    """A figure for a table: floats to ``digits`` significant digits, None as ``missing``."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _zeusd_markdown(zeusd: dict[str, Any] | None, tag: str) -> list[str]:
    if zeusd is None:
        return []
    gpu, o = zeusd["checked_gpu"], zeusd["monitor_overhead_us"]
    auth = f"required, scopes {', '.join(zeusd['scopes'])}" if zeusd["auth_required"] else "off"
    lines = [
        "",
        f"## zeusd{tag}",
        "",
        f"{zeusd['endpoint']}: groups {', '.join(zeusd['enabled_api_groups'])}; auth "
        f"{auth}; "
        f"setting a limit permitted: {zeusd['setting_a_limit_permitted']} (never "
        f"tried). GPU {gpu['id']} {gpu['model']}, range {gpu['power_limit_range_w']} W, "
        f"limit {gpu['power_limit_w']} W, energy by {gpu['energy_source']}; CPU/DRAM "
        f"through zeusd: {zeusd['cpu_read']}.",
        "",
        "| window | time s | zeusd J | NVML J | agreement % |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {i + 1} | {w['time_s']:.3f} | {w['zeusd_j']:.2f} | {w['nvml_j']:.2f} | "
        f"{w['agreement_pct']:.2f} |"
        for i, w in enumerate(zeusd["windows"])
    ]
    lines += [
        "",
        f"Median agreement {zeusd['agreement_pct_median']:.2f} %. Monitor overhead "
        f"through zeusd: begin {o['begin_median_us']:.1f} µs (p90 "
        f"{o['begin_p90_us']:.1f}), end {o['end_median_us']:.1f} µs (p90 "
        f"{o['end_p90_us']:.1f}).",
    ]
    return lines


def _update_period_text(cvs: dict[str, Any]) -> str:
    probes = ", ".join(f"{p:.3f}" for p in cvs["update_periods_s"])
    if cvs["update_period_s_median"] == 0:
        return f"The counter advanced at every read ({probes} s): no update period to respect."
    return (
        f"The counter advances every {cvs['update_period_s_median']:.3f} s (median of "
        f"{probes} s): a window reads whole updates, so the profiler measures each power "
        f"limit for at least {cvs['profile_slice_min_s']:.2f} s "
        f"({cvs['slice_counter_updates']} updates)."
    )


def markdown(report: dict[str, Any]) -> str:
    label = report["measurement"]
    tag = " (SIMULATED: fake NVML on the CPU, not a GPU)" if label == "simulated" else " (measured)"
    inv = report["inventory"]
    lines = [
        f"# gpu_check{tag}",
        "",
        f"{report['generated_at']} · host {report['host']} · torch {report['torch']} · "
        f"{report['elapsed_s']:.0f} s · NVML setting changes attempted: "
        f"{len(report['nvml_changes_attempted'])}",
        "",
        f"## Inventory{tag}",
        "",
        "| field | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {fmt(v)} |" for k, v in inv.items()]
    lines += ["", f"Host CPU/DRAM energy (RAPL): {report['rapl']}", ""]
    cvs = report["energy_counter_vs_sampling"]
    lines += [f"## Energy counter vs sampled power{tag}", ""]
    if cvs.get("energy_counter"):
        lines += [
            "| window | time s | counter J | sampled J | agreement % |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {i + 1} | {w['time_s']:.3f} | {w['counter_j']:.2f} | "
            f"{w['sampled_j']:.2f} | {w['agreement_pct']:.2f} |"
            for i, w in enumerate(cvs["windows"])
        ]
        o = cvs["monitor_overhead_us"]
        lines += [
            "",
            _update_period_text(cvs),
            "",
            "Each part of a window's edge, apart (median µs): "
            + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in cvs["read_costs_us"].items())
            + ".",
            "",
            "Average power over windows of one length under the same load (spread: standard "
            "deviation over mean; range: max - min over mean):",
            "",
            "| window s | mean W | spread % | range % |",
            "|---|---|---|---|",
            *(
                f"| {r['window_s']:.2f} | {r['mean_w']:.1f} | {r['spread_pct']:.2f} | "
                f"{r['range_pct']:.2f} |"
                for r in cvs["power_spread_by_window"]
            ),
            "",
            f"Median agreement {cvs['agreement_pct_median']:.2f} % (min "
            f"{cvs['agreement_pct_min']:.2f} %). Monitor overhead (counter): begin "
            f"{o['begin_median_us']:.1f} µs (p90 {o['begin_p90_us']:.1f}), end "
            f"{o['end_median_us']:.1f} µs (p90 {o['end_p90_us']:.1f}).",
        ]
    else:
        lines += [cvs["note"]]
    lines += _zeusd_markdown(report.get("zeusd"), tag)
    sync = report["synchronisation"]
    lines += [
        "",
        f"## Synchronising at window edges{tag}",
        "",
        "| | time/step s (mean ± sd) | energy/step J (mean ± sd) |",
        "|---|---|---|",
    ]
    for label_ in ("without", "with"):
        t, e = sync[label_]["time_per_step_s"], sync[label_]["energy_per_step_j"]
        lines.append(
            f"| {label_} | {t['mean']:.4g} ± {t['stdev']:.2g} | "
            f"{e['mean']:.4g} ± {e['stdev']:.2g} |"
        )
    bookmark = report.get("bookmark_s_per_step")
    if bookmark:
        lines += [
            "",
            f"## The profiler's per-step bookmark in a training loop{tag}",
            "",
            "| bookmark | s/step |",
            "|---|---|",
            *(f"| {k.replace('_', ' ')} | {v:.4g} |" for k, v in bookmark.items()),
        ]
    lines += [
        "",
        f"## Training at four batch sizes{tag}",
        "",
        "| model | batch | s/step | GPU J/step | CPU J/step | DRAM J/step | s/epoch | "
        "GPU J/epoch | samples/GPU J |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["workloads"]:
        if "skipped" in r:
            lines.append(
                f"| {r['model']} | {r['batch_size']} | skipped: {r['skipped']} | | | | | | |"
            )
            continue
        lines.append(
            f"| {r['model']} | {r['batch_size']} | {fmt(r['time_per_step_s'])} | "
            f"{fmt(r['gpu_energy_per_step_j'])} | {fmt(r['cpu_energy_per_step_j'])} | "
            f"{fmt(r['dram_energy_per_step_j'])} | {fmt(r['time_per_epoch_s'])} | "
            f"{fmt(r['gpu_energy_per_epoch_j'])} | {fmt(r['samples_per_gpu_j'])} |"
        )
    eng = report["engine"]
    lines += [
        "",
        f"## Engine: {len(eng['recurrences'])} recurrences in measure mode{tag}",
        "",
        f"Job {eng['job']}, batch sizes {eng['batch_sizes']}, SQLite store. Most "
        f"chosen: {eng['most_chosen_batch_size']}; last five: "
        f"{eng['last_five_batch_sizes']}.",
        "",
        "| # | tried | batch | phase | limit W | epochs | target | energy J | time s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['recurrence']} | {r['tried']} | {r['batch_size']} | {r['phase']} | "
        f"{r['power_limit_w']} | {r['epochs']} | {r['reached_target']} | "
        f"{r['energy_j']:.4g} | {r['time_s']:.4g} |"
        for r in eng["recurrences"]
    ]
    return "\n".join(lines) + "\n"


# --- main -------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_check.py",
        description=(
            "Check zeus-airflow's measurement on one NVIDIA GPU without changing any GPU "
            "setting (NVML reads and measure mode only). Needs torch (with CUDA) and "
            "nvidia-ml-py, plus SQLAlchemy, alembic, numpy and psutil; never Airflow. "
            "Writes gpu_check.json and gpu_check.md (format: docs/devices.md)."
        ),
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("gpu_check_results"),
        help="folder for gpu_check.json and gpu_check.md (default: ./gpu_check_results)",
    )
    parser.add_argument(
        "--gpu",
        type=int,
        default=0,
        help="CUDA device number of the GPU to check, as CUDA numbers the visible GPUs (default 0)",
    )
    parser.add_argument(
        "--simulated",
        action="store_true",
        help="run on the CPU against the fake NVML (every figure labelled "
        "simulated): for CI and for trying the script without a GPU",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny models, few steps, 10 recurrences: seconds on a CPU",
    )
    parser.add_argument(
        "--recurrences",
        type=int,
        default=None,
        help="engine recurrences (at least 10; default 12, 10 with --quick)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=BUDGET_S,
        help=f"time budget in s; later parts shrink to fit (default "
        f"{BUDGET_S:g}, within 8 minutes)",
    )
    parser.add_argument(
        "--zeusd",
        action="store_true",
        help="also measure through zeusd (ZEUSD_SOCK_PATH or ZEUSD_HOST_PORT; "
        "with --simulated, a fake zeusd over the fake NVML), read only: "
        "every POST to the daemon is refused before it is sent",
    )
    parser.add_argument(
        "--zeusd-gpu",
        type=int,
        default=0,
        help="the daemon's index of the GPU to check (zeusd numbers the host's GPUs; default 0)",
    )
    parser.add_argument(
        "--powercap-root",
        type=Path,
        default=None,
        help="the powercap sysfs folder (default /sys/class/powercap)",
    )
    args = parser.parse_args(argv)
    if args.recurrences is not None and args.recurrences < 10:
        parser.error(f"--recurrences={args.recurrences} is invalid: expected at least 10")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    deadline_s = started + args.budget_s
    sizes = QUICK if args.quick else Sizes()
    if args.recurrences is not None:
        sizes = Sizes(**{**asdict(sizes), "recurrences": args.recurrences})
    import torch  # after --help, which needs no torch

    from zeus_airflow.core.devices.nvml import NVMLGPUs
    from zeus_airflow.core.devices.rapl import POWERCAP_ROOT, RAPLReader

    with tempfile.TemporaryDirectory(prefix="gpu_check-") as scratch:
        fake, simulated_host = None, None
        if args.simulated:
            from zeus_airflow.testing import FakeGPUSpec, FakeNVML

            fake = FakeNVML(
                1, FakeGPUSpec(model="NVIDIA A40 (simulated)", default_limit_mw=300_000)
            )
            nvml: Any = ReadOnlyNVML(fake)
            device = "cpu"
            torch.set_num_threads(1)  # CI machines are small and shared: no oversubscription
        else:
            import pynvml

            nvml = ReadOnlyNVML(pynvml)
            if not torch.cuda.is_available():
                raise SystemExit(
                    "gpu_check: torch sees no CUDA GPU; run with --simulated to "
                    "try the script on the CPU"
                )
            device = f"cuda:{args.gpu}"
        rapl = RAPLReader(args.powercap_root or POWERCAP_ROOT)
        rapl_note = "measured" if rapl.available else rapl.unavailable_because
        if args.simulated and not rapl.available:
            simulated_host = _SimulatedPowercap(Path(scratch) / "powercap")
            rapl = RAPLReader(simulated_host.tree.root)
            rapl_note = "simulated (a fake powercap tree: 65 W package, 8 W DRAM)"
        try:
            index = nvml_index(nvml, args.gpu, "gpu_check")
            gpus = NVMLGPUs([index], nvml=nvml)
            daemon = _fake_zeusd(fake, Path(scratch)) if args.zeusd and fake else None
            zeusd = _zeusd_side(args, daemon)
            if zeusd is not None and zeusd.host is not None:
                rapl_note = "through zeusd's /cpu group" + (
                    " (SIMULATED: the fake zeusd's 60 W package, 8 W DRAM)" if daemon else ""
                )
            try:
                report = _checks(
                    torch, nvml, gpus, index, rapl, sizes, device, Path(scratch), deadline_s, zeusd
                )
            finally:
                gpus.close()
                if zeusd is not None:
                    zeusd.gpus.close()
                if daemon is not None:
                    daemon.stop()
        finally:
            rapl.close()
            if simulated_host is not None:
                simulated_host.stop()
    report.update(
        {
            "measurement": "simulated" if args.simulated else "measured",
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": platform.node(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "rapl": rapl_note,
            "nvml_changes_attempted": nvml.attempted,
            "zeusd_changes_attempted": None if zeusd is None else zeusd.client.attempted,
            "fake_nvml_set_calls": None if fake is None else len(fake.set_calls),
            "sizes": asdict(sizes),
            "elapsed_s": time.monotonic() - started,
        }
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (args.out / "gpu_check.md").write_text(markdown(report))
    progress(
        f"wrote {args.out / 'gpu_check.json'} and gpu_check.md in "
        f"{report['elapsed_s']:.0f} s ({report['measurement']})"
    )
    return 0


def _fake_zeusd(fake: Any, scratch: Path) -> Any:
    from zeus_airflow.testing import FakeZeusd

    return FakeZeusd(scratch / "zeusd.sock", fake).start()


def _zeusd_side(args: argparse.Namespace, daemon: Any) -> ZeusdSide | None:
    """The GPU through zeusd with ``--zeusd``: the fake daemon with ``--simulated``, else
    the one the environment names."""
    if not args.zeusd:
        return None
    from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint

    endpoint = (
        ZeusdEndpoint(socket_path=str(daemon.socket_path))
        if daemon is not None
        else ZeusdEndpoint.from_env()
    )
    if endpoint is None:
        raise SystemExit("gpu_check: --zeusd needs ZEUSD_SOCK_PATH or ZEUSD_HOST_PORT")
    return open_zeusd(endpoint, args.zeusd_gpu)


def _checks(
    torch: Any,
    nvml: Any,
    gpus: Any,
    index: int,
    rapl: Any,
    sizes: Sizes,
    device: str,
    scratch: Path,
    deadline_s: float,
    zeusd: ZeusdSide | None = None,
) -> dict[str, Any]:
    progress(f"inventory of NVML GPU {index}")
    report: dict[str, Any] = {"inventory": inventory(nvml, index)}
    load = make_step(torch, "cnn", sizes, sizes.cnn_batch_sizes[1], device)
    progress("energy counter against sampled power")
    report["energy_counter_vs_sampling"] = counter_vs_sampling(
        nvml, index, sizes, load, time.monotonic
    )
    if zeusd is not None:  # from here on, measured through the daemon
        progress(f"zeusd: {zeusd.gpus.discovery.endpoint.where}, energy against NVML")
        report["zeusd"] = zeusd_checks(zeusd, gpus, sizes, load)
        gpus, rapl = zeusd.gpus, zeusd.host or rapl
    progress("synchronising at window edges, with and without")
    report["synchronisation"] = synchronisation_effect(gpus, load, sizes, rapl)
    progress("the profiler's per-step bookmark in a training loop")
    report["bookmark_s_per_step"] = bookmark_cost(gpus, load, sizes)
    report["workloads"] = []
    for kind in ("cnn", "transformer"):
        progress(f"{kind} at four batch sizes")
        report["workloads"] += train_at_batch_sizes(
            torch, gpus, rapl, kind, sizes, device, deadline_s
        )
    progress(f"engine: {sizes.recurrences} recurrences in measure mode")
    report["engine"] = engine_run(torch, gpus, rapl, sizes, device, scratch / "zeus.db", deadline_s)
    return report


if __name__ == "__main__":
    sys.exit(main())
