"""The table of device backends (issue 49): a new backend is one module and one entry.

Before the table, a backend touched four source files besides its own module: ``spec.py`` in
four places (the forms, the backend literal, ``parse_device``, ``open_device``),
``measure_only.py`` (the local readers) and ``train/gpu_lease.py`` (the lease prefixes and the
restore). Here a backend made of test doubles (the fake NVML under a prefix of its own) is
added with one entry and no other edit: the ``device`` form parses, opens, is listed in the
messages, is tried by ``auto`` and by the measure-only fallback, and its leases are restored.
"""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fixtures_store import leave_lease

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.devices import amdsmi, backends, simulated, zeusd
from zeus_airflow.core.devices.backends import BACKENDS, Backend
from zeus_airflow.core.devices.base import BackendUnavailableError
from zeus_airflow.core.devices.forms import by_indices
from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.devices.spec import open_device, parse_device
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.gpu_lease import GPULeases, restore_host_leases
from zeus_airflow.testing import FakeGPUSpec, FakeNVML

PACKAGE = Path(__file__).resolve().parents[3] / "zeus_airflow"
PREFIX = "double:"


class DoubleGPUs(NVMLGPUs):
    """The new backend's module: GPUs of the fake NVML whose lease ids carry its prefix."""

    control = "double"

    def __init__(self, indices: Sequence[int] | None, fake: FakeNVML) -> None:
        super().__init__(indices, nvml=fake)
        self.uuids = tuple(PREFIX + u for u in self.uuids)


@pytest.fixture
def fake() -> FakeNVML:
    return FakeNVML(2, FakeGPUSpec(default_limit_mw=250_000))


@pytest.fixture
def double(fake: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """The one table entry the new backend needs."""
    entry = Backend(
        "double:<i>[,<j>...]",
        by_indices("double"),
        lambda spec, _traces: DoubleGPUs(spec.indices, fake),
        read_locally=lambda indices: DoubleGPUs(indices, fake),
        reader_name="the double",
        lease_prefixes=(PREFIX,),
        restore=lambda index: DoubleGPUs((index,), fake),
        by_hand="double-smi {index} {limit_w}",
    )
    monkeypatch.setitem(BACKENDS, "double", entry)
    yield entry


def test_a_new_backend_parses_opens_and_is_named_in_messages(double: Backend) -> None:
    spec = parse_device("double:1")
    assert (spec.backend, spec.indices) == ("double", (1,))
    gpus = open_device(spec)
    assert isinstance(gpus, DoubleGPUs) and gpus.indices == (1,)
    with pytest.raises(ConfigError, match=r"expected one of auto, .*double:<i>\[,<j>\.\.\.\]"):
        parse_device("double:x")


def test_auto_and_the_measure_only_fallback_try_it_in_table_order(
    double: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zeus_airflow.core.devices.backends import local_readers
    from zeus_airflow.core.devices.measure_only import measure_only, open_first_local

    def absent(_indices: object) -> NVMLGPUs:
        raise BackendUnavailableError("no such library here")

    for name in ("nvml", "amdsmi"):  # neither NVIDIA's nor AMD's library is on this node
        monkeypatch.setitem(BACKENDS, name, _with(BACKENDS[name], read_locally=absent))
    assert isinstance(open_first_local(local_readers()), DoubleGPUs)
    frozen = measure_only((0, 1), BackendUnavailableError("zeusd is away"), local_readers())
    assert frozen.limits_fixed_because is not None
    assert "through the double (read-only)" in frozen.limits_fixed_because


def test_its_leases_are_restored_through_its_entry(
    double: Backend, fake: FakeNVML, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/zeus.db"
    SQLStore(url, create_schema=True).engine.dispose()
    gpus = DoubleGPUs((1,), fake)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leave_lease(url, gpus.uuids[0], 250, dead.pid, gpu_index=1)
    gpus.set_power_limits_w([150])

    done = restore_host_leases(GPULeases(SQLStore(url)), logging.getLogger("test"))

    assert [lease.gpu_uuid for lease in done.restored] == [gpus.uuids[0]]
    assert fake.limits_mw() == [250_000, 250_000]


def test_the_training_layer_names_no_backend() -> None:
    """``core/train`` imports no backend's module: it reads the table."""
    modules = {f"zeus_airflow.core.devices.{name}" for name in BACKENDS}
    for path in (PACKAGE / "core" / "train").glob("*.py"):
        imported = {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert not imported & modules, f"{path.name} imports {imported & modules}"


def test_the_backend_modules_agree_with_the_table() -> None:
    """The table repeats a few constants so that parsing imports no device module."""
    assert BACKENDS["amdsmi"].lease_prefixes == (amdsmi.LEASE_ID_PREFIX,)
    assert BACKENDS["zeusd"].lease_prefixes == (zeusd.LEASE_ID_PREFIX, zeusd.INDEX_LEASE_PREFIX)
    assert backends.SIMULATED_DEFAULT_WORKLOAD == simulated.DEFAULT_CURVE_WORKLOAD
    assert backends.lease_backend("GPU-0b4a") is BACKENDS["nvml"]  # NVML's own UUIDs
    assert backends.lease_backend("pci:0000:c1:00.0") is BACKENDS["zeusd"]


def _with(entry: Backend, **changes: object) -> Backend:
    from dataclasses import replace

    return replace(entry, **changes)  # type: ignore[arg-type]
