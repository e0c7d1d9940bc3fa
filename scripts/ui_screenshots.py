"""Screenshots of the Zeus pages at 1,280 px wide, in Debian's headless Chromium (installed by
scripts/test-services.sh), into artifacts/:

* ``ui-fleet-1280.png``: the fleet page of a fleet with every kind of job;
* ``ui-job-1280.png``: a mapped carbon-aware job's page (its budget card, the runs table);
* ``ui-fleet-inflight-1280.png``: the fleet page while a try is in flight.

They are the browser tests that check those pages fit 1,280 px (tests/plugins/test_ui_fit.py,
tests/plugins/test_ui_tries_in_flight.py), run with ``$ZEUS_ARTIFACTS`` set: the pages are
checked as they are shot. Chromium runs with a profile folder of its own, made and removed
for it (the tests' ``browser`` fixture, ``--user-data-dir``).

    .venv/bin/python scripts/ui_screenshots.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = (
    "tests/plugins/test_ui_fit.py::test_the_fleet_and_a_job_page_fit_1280_px_without_scrolling_sideways",
    "tests/plugins/test_ui_tries_in_flight.py::test_the_fleet_page_during_a_run_fits_1280_px",
)
SHOTS = ("ui-fleet-1280.png", "ui-job-1280.png", "ui-fleet-inflight-1280.png")


def main() -> int:
    env = {**os.environ, "ZEUS_ARTIFACTS": "artifacts"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *TESTS]
    done = subprocess.run(command, cwd=REPO, env=env, check=False)
    if done.returncode != 0:
        return done.returncode
    for name in SHOTS:
        print(f"artifacts/{name}: {(REPO / 'artifacts' / name).stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
