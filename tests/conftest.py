"""Shared test setup. Fixture modules live beside this file, one per concern."""

import os

import pytest

# Tiny models are built from configs: a test that reached for the Hugging Face Hub would fail.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

pytest_plugins = ["fixtures_airflow", "fixtures_grid", "fixtures_store", "fixtures_ui"]


@pytest.fixture
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every GPU NVML lists is visible, whatever the machine running the tests sets."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
