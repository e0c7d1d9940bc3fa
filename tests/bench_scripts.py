"""The GPU node's bench scripts (bench/gpu_check.py, bench/gpu_recurring.py) as such a node
runs them: in a fresh interpreter where Airflow cannot be imported; or loaded as modules, to
call their parts."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


def run_script(
    script: str, args: list[str], *, without: tuple[str, ...] = ("airflow",)
) -> subprocess.CompletedProcess[str]:
    """``bench/<script>`` with ``args``, as a node without ``without`` would run it
    (``sys.modules[name] = None`` makes every import of it fail, as if it were not
    installed); fails if Airflow was imported all the same."""
    hide = "".join(f"sys.modules[{name!r}] = None\n" for name in without)
    path = BENCH / script
    code = (
        "import runpy, sys\n"
        + hide
        + textwrap.dedent(f"""
        sys.argv = [{script!r}, *{args!r}]
        try:
            runpy.run_path({str(path)!r}, run_name="__main__")
        finally:
            assert not any(m == "airflow" or m.startswith("airflow.")
                           for m, v in sys.modules.items() if v is not None), "Airflow imported"
        """)
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def load_script(script: str) -> ModuleType:
    """``bench/<script>`` as a module named after it (bench/ on the path: gpu_recurring
    imports gpu_check)."""
    name = Path(script).stem
    spec = importlib.util.spec_from_file_location(name, BENCH / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def assert_help_needs_neither_airflow_nor_torch(script: str, options: tuple[str, ...]) -> None:
    """``--help`` works where Airflow, torch and NVML are missing, lists ``options`` and says
    that the script changes no GPU setting."""
    done = run_script(script, ["--help"], without=("airflow", "torch", "pynvml"))
    assert done.returncode == 0, done.stderr
    assert [o for o in options if o not in done.stdout] == []
    assert "without changing any GPU setting" in " ".join(done.stdout.split())
