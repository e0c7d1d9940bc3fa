"""A train function that fails as training code does: it trains two epochs on the replay
GPU (so the try has measured energy), then raises. Imported by the integration tests and by
DAG files their Airflow processes parse (``tests/`` on ``PYTHONPATH``): no other import."""

from __future__ import annotations

from typing import Any

FAILS_IN_EPOCH = 2


def out_of_memory(run: Any) -> None:
    gpu = run.device
    gpu.use_batch_size(run.batch_size)
    for epoch in run.epochs():
        run.run_steps(gpu.steps_per_epoch(), gpu.advance_steps)
        run.report_metric(0.1)
        if epoch == FAILS_IN_EPOCH:
            raise RuntimeError(f"the test's out of memory, in epoch {epoch}")
