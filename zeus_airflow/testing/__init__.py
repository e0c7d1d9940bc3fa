"""Test doubles shipped with the package, for our tests and for users testing their DAGs
without a GPU. Only the GPU is ever faked: :mod:`.fake_nvml` speaks the NVML API."""

from zeus_airflow.testing.fake_nvml import (
    A100_PCIE,
    A100_SXM4,
    FakeGPUSpec,
    FakeNVML,
    ManualClock,
    SetLimitCall,
)

__all__ = ["A100_PCIE", "A100_SXM4", "FakeGPUSpec", "FakeNVML", "ManualClock", "SetLimitCall"]
