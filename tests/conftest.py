"""Shared test setup. Fixture modules live beside this file, one per concern."""

import os
import sys

import pytest

# Tiny models are built from configs: a test that reached for the Hugging Face Hub would fail.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# One compute thread for PyTorch (and NumPy's BLAS) in each test process and what it starts:
# the suite runs three processes on two cores (Makefile), and each process's extra threads
# only spin waiting for a core, a third more CPU for the same training (bench/RESULTS.md).
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# ZEUS_TEST_WITHOUT=mlflow,openlineage,airflow.providers.openlineage: run tests as if those
# modules were not installed (the extras' absence: docs/integrations.md), set before anything
# imports them.
for _module in filter(None, os.environ.get("ZEUS_TEST_WITHOUT", "").split(",")):
    sys.modules[_module.strip()] = None  # type: ignore[assignment]

# The tests mirror the package's folders (tests/core/decide/ for zeus_airflow/core/decide/...).
# pytest's default import mode (prepend; tests/ has no __init__.py) puts this folder and each
# test module's own folder on sys.path: a module may import a helper module from tests/ (the
# fixtures_*.py, paths, ...) or a test module of its own folder; what tests of more than one
# folder share lives in a fixtures_*.py here.
pytest_plugins = ["fixtures_airflow", "fixtures_grid", "fixtures_store", "fixtures_ui"]


@pytest.fixture
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every GPU NVML lists is visible, whatever the machine running the tests sets."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


# --- markers (registered in pyproject.toml), assigned here rather than in each test file ------
SLOW_FIXTURES = frozenset({"api_server", "browser"})
"""A real api-server (and Chromium) for the UI: tens of seconds to start."""
SLOW_HELPERS = frozenset({"scheduler_harness"})
"""Modules whose users start Airflow's real servers (scheduler, dag-processor, api-server)."""
SLOW_MODULES = frozenset(
    {
        "test_bench_quick",  # every bench script in a subprocess
        "test_celery_topology",  # a real Celery worker and Redis
        "test_deploy_compose",  # docker-compose config and the image's files
        "test_light_install",  # a base install in a fresh venv
        "test_gpu_check",  # bench/gpu_check.py in fresh interpreters
        "test_gpu_recurring",  # bench/gpu_recurring.py likewise, training 12 recurrences
        "test_distributed",  # DDP ranks as processes
        "test_capriccio_dag",  # the Capriccio DAG's real training
        "test_capriccio_training",
        "test_integration_huggingface",  # real Trainer runs
        "test_integration_lightning",
        "test_operator_demo",  # the demo's DAG over many logical dates
        "test_standalone",  # the CLI in fresh interpreters
        "test_dags",  # the example DAGs' real trainings (DDP ranks, Hugging Face, Lightning)
        "test_store_concurrency",  # racing worker processes on both backends
    }
)
"""Modules whose tests take seconds each (measured with --durations)."""
SLOW_TESTS = frozenset(
    {
        "test_airflow_compat.py::test_importing_on_airflow_3_1_names_the_supported_versions",
        # replayed tasks in a process that has not imported mlflow
        "test_integration_mlflow.py::test_a_dead_tracking_server_holds_neither_training_nor_the_task",
    }
)
"""Single tests as ``<file>::<function>``: a fresh interpreter importing Airflow each."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``slow`` on what ``make test-fast`` leaves out: by module, by the helper module a test
    module imports, or by fixture, so that a new test there is marked without a decorator.

    Then slow tests go first: pytest-xdist (``-n 2``, Makefile) hands tests out in this order,
    so that the run ends on short tests that the two processes share evenly, instead of one
    process finishing a long scheduler or UI test while the other waits idle."""
    for item in items:
        module = getattr(item, "module", None)
        name = getattr(module, "__name__", "")
        helpers = (
            {getattr(value, "__module__", None) for value in vars(module).values()}
            if module is not None
            else set()
        )
        function = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        if (
            name in SLOW_MODULES
            or helpers & SLOW_HELPERS
            or function in SLOW_TESTS
            or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
        ):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow first
