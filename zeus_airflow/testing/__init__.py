"""Test doubles shipped with the package, for our tests and for users testing their DAGs
without a GPU. Only the GPU is ever faked: :mod:`.fake_nvml` speaks the NVML API,
:mod:`.fake_amdsmi` AMD SMI's Python API, and :mod:`.fake_zeusd` serves zeusd's HTTP API over
the fake NVML on a Unix socket or TCP, answering as zeusd 0.5.0 or later does."""

from zeus_airflow.testing.fake_amdsmi import FakeAMDSMI
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
    "FakeAMDSMI",
    "FakeCPU",
    "FakeGPUSpec",
    "FakeNVML",
    "FakeZeusd",
    "ManualClock",
    "SetLimitCall",
]
