"""The repository stands alone: a copy of its tracked files, with nothing beside it, runs the
demo on the traces shipped in the package, and no tracked file points outside the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_airflow import REPO

# Built from pieces so that this file does not match its own search.
OUTSIDE = ("../" + "shared", "shared/" + "traces", "shared/" + "reference", "notes " + "§")


def tracked_files() -> list[str]:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name]


def test_no_tracked_file_points_outside_the_repository() -> None:
    found = []
    for name in tracked_files():
        path = REPO / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # images
            continue
        found += [f"{name}: {needle}" for needle in OUTSIDE if needle in text]
    assert found == []


@pytest.mark.timeout(180)
def test_the_demo_runs_from_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    copy = tmp_path / "standalone" / "zeus-airflow"
    for name in tracked_files():
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    assert not (copy.parent / "shared").exists()
    # The environment's Python and packages, this copy's code, no traces folder named.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ZEUS_"))}
    env["PYTHONPATH"] = str(copy)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zeus_airflow.cli",
            "demo",
            "--days",
            "2",
            "--airflow-home",
            str(tmp_path / "home"),
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert f"DAGs folder:  {copy / 'dags'}" in out  # the copy's code ran, not the checkout's
    assert f"ZEUS_TRACES_DIR={copy / 'zeus_airflow' / 'data' / 'traces'}" in out
    assert "2025-01-01  success" in out and "2025-01-02  success" in out
    # The report's headline, the one saving the demo states (issue 47: one Default).
    assert "replayed from the paper's traces" in out
    assert "Zeus over the 2 runs (replayed from the paper's traces): " in out
    assert "of Default's energy" in out
