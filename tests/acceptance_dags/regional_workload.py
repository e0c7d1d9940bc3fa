"""The workload of the noise acceptance test (tests/operators/test_acceptance_noise.py): a small
PyTorch
MLP retrained daily per region on the CPU, with an injected setup delay before training.

Each region has its own data: 8 classes of Gaussian clusters in 32 dimensions whose centres
and spread depend on the region, and a new sample each day. The learning rate grows with the
square root of the batch size (as in dags/hourly_retrain.py). Batches are sliced from a
shuffled tensor rather than drawn through a DataLoader, so a step's cost is the optimiser's
fixed overhead plus the work per sample, as on a GPU: small sizes pay the overhead many times,
large ones need many more epochs, and the middle size is clearly the cheapest
(bench/acceptance_calibration.py measures it).

PyTorch, the standard library and `zeus_airflow.examples.classifier`: the calibration script
imports it without Airflow.
"""

from __future__ import annotations

import math
import os
import random
import time
import zlib
from collections.abc import Iterator
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zeus_airflow import TrainingRun

DAG_ID = "regional_retrain"
FIRST_DAY = "2026-01-01"
DAYS = int(os.environ.get("ZEUS_ACCEPTANCE_DAYS", "20"))
"""The DAG's catch-up window, fixed: a day's data is drawn from its date, so the test sees the
same data whatever day it runs. ``ZEUS_ACCEPTANCE_DAYS`` shortens the window from its start
(the smoke test's 2 days through the real scheduler); the policy's criterion needs all 20. The
test's criterion compares the last five days' mean cost
with the mean over all twenty; in this window the cheapest size needs as many epochs in the
last five days as on average in every region (bench/acceptance_calibration.md, ``--window``),
so the criterion measures the policy, not a run of harder days at the end."""
REGIONS: tuple[str, ...] = ("emea", "americas", "apac")
FEATURES, CLASSES, HIDDEN = 32, 8, 256
TRAIN_SAMPLES, VALIDATION_SAMPLES = 32768, 8192
BASE_BATCH_SIZE, BASE_LEARNING_RATE = 32, 0.003
LR_CAP_BATCH_SIZE = 32
SPREAD = {"emea": 0.55, "americas": 0.57, "apac": 0.50}
"""Distance scale of each region's cluster centres: a larger one separates classes better."""
MAX_SETUP_DELAY_S = 5.0

BATCH_SIZES: tuple[int, ...] = (8, 64, 256, 1024)
DEFAULT_BATCH_SIZE = 256
TARGET_ACCURACY = 0.87
MAX_EPOCHS = 20


def window_days() -> list[str]:
    """The DAG's ``ds_nodash`` values, in order: DAYS days from FIRST_DAY."""
    first = date.fromisoformat(FIRST_DAY)
    return [(first + timedelta(days=i)).strftime("%Y%m%d") for i in range(DAYS)]


def region_seed(region: str) -> int:
    return zlib.crc32(region.encode())


def setup_delay_s(region: str, day: str) -> float:
    """The pseudo-random setup delay (0 to 5 s) of one region's run on one day."""
    return random.Random(f"{region}:{day}").uniform(0.0, MAX_SETUP_DELAY_S)


def learning_rate(batch_size: int) -> float:
    """Square-root scaling up to LR_CAP_BATCH_SIZE, constant above it."""
    return BASE_LEARNING_RATE * math.sqrt(min(batch_size, LR_CAP_BATCH_SIZE) / BASE_BATCH_SIZE)


def make_data(region: str, seed: int, samples: int) -> tuple[Any, Any]:
    """``samples`` points of ``region``'s clusters, drawn with ``seed``."""
    from zeus_airflow.examples import classifier

    return classifier.clusters(
        region_seed(region),
        seed,
        samples,
        features=FEATURES,
        classes=CLASSES,
        spread=SPREAD[region],
    )


def batches(features: Any, labels: Any, batch_size: int, seed: int) -> Iterator[tuple[Any, Any]]:
    """One epoch of shuffled batches (the last one may be short)."""
    import torch

    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    for start in range(0, len(labels), batch_size):
        index = order[start : start + batch_size]
        yield features[index], labels[index]


def train(
    run: TrainingRun, region: str, day: str, setup_delay: float | None = None
) -> dict[str, Any]:
    """Build the model (an injected setup delay of 0 to 5 s first, as a busy machine would
    spend importing and loading), then train it on ``region``'s data of ``day`` (YYYYMMDD).

    ``setup_delay``: override the pseudo-random delay (the calibration script uses 0)."""
    import torch

    from zeus_airflow.examples import classifier

    torch.set_num_threads(1)  # parallel tasks on one machine must not fight over cores
    time.sleep(setup_delay_s(region, day) if setup_delay is None else setup_delay)
    seed = int(day) * 7 + region_seed(region) % 1000
    features, labels = make_data(region, seed, TRAIN_SAMPLES)
    val_features, val_labels = make_data(region, seed + 1, VALIDATION_SAMPLES)
    torch.manual_seed(seed)
    model = classifier.mlp(FEATURES, HIDDEN, CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate(run.batch_size))
    accuracy = classifier.fit(
        run,
        model,
        optimizer,
        lambda epoch: batches(features, labels, run.batch_size, seed + epoch),
        (val_features, val_labels),
    )
    return {"region": region, "validation_accuracy": accuracy}
