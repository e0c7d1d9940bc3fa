"""Test doubles shipped with the package, for our tests and for users testing their DAGs
without a GPU. Only the GPU is ever faked: :mod:`.fake_nvml` speaks the NVML API, and
:mod:`.fake_zeusd` serves zeusd's HTTP API over it on a Unix socket."""

from zeus_airflow.testing.fake_nvml import (
    A100_PCIE,
    A100_SXM4,
    FakeGPUSpec,
    FakeNVML,
    ManualClock,
    SetLimitCall,
)
from zeus_airflow.testing.fake_zeusd import FakeCPU, FakeZeusd

__all__ = [
    "A100_PCIE",
    "A100_SXM4",
    "FakeCPU",
    "FakeGPUSpec",
    "FakeNVML",
    "FakeZeusd",
    "ManualClock",
    "SetLimitCall",
]
