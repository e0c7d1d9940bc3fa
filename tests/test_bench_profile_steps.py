"""bench/profile_steps.py --quick runs here (one replayed cell, seconds) so it cannot rot."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "profile_steps.py"


def test_the_quick_benchmark_counts_fewer_steps_after(tmp_path: Path) -> None:
    output = tmp_path / "profile_steps"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--output", str(output)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(output.with_suffix(".csv").open()))
    assert (row["gpu"], row["workload"]) == ("v100", "cifar100")
    assert int(row["before_slices_b0"]) == 7  # the old sweep measured every limit
    assert int(row["after_slices_b0"]) < 7
    assert int(row["after_steps_b0"]) < int(row["before_steps_b0"])
    assert row["same_optimum_b0"] == "True"
    assert "REPLAYED" in output.with_suffix(".md").read_text()
