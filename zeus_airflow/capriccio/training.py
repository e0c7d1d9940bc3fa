"""The Capriccio train function: real PyTorch training of one slice, driven by a TrainingRun.

```python
from zeus_airflow.capriccio.job import SIMULATED_DEVICE, CapriccioJob

ZeusTrainOperator(task_id="train", train=train_slice,
                  train_kwargs={"slice_dir": "{{ ti.xcom_pull(task_ids='prepare_slice') }}"},
                  device=SIMULATED_DEVICE, **CapriccioJob().operator_kwargs())
```

Every try trains a fresh model on the slice's training tweets at the batch size Zeus chose,
reports validation accuracy after each epoch, and returns the last accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zeus_airflow.capriccio.corpus import read_tweets
from zeus_airflow.capriccio.model import (
    Encoded,
    ModelSettings,
    Optimizer,
    TextClassifier,
    accuracy,
    batches,
    encode,
)
from zeus_airflow.capriccio.slicing import TRAIN_FILE, VAL_FILE
from zeus_airflow.core.common.extras import raise_naming_extra
from zeus_airflow.core.train.run import TrainingRun

try:
    import torch
    from torch.nn import functional
except ModuleNotFoundError as err:  # the base install has no torch: name the extra
    raise_naming_extra(err, "Capriccio training (zeus_airflow.capriccio.training)")


@dataclass(frozen=True)
class SliceData:
    """One slice's training and validation tweets, encoded."""

    train: Encoded
    val: Encoded

    @classmethod
    def from_dir(cls, path: str | Path, settings: ModelSettings) -> SliceData:
        """Read a slice written by :func:`~zeus_airflow.capriccio.slicing.write_slice`."""
        parts = []
        for name in (TRAIN_FILE, VAL_FILE):
            tweets = read_tweets(Path(path) / name)
            parts.append(encode(tweets.texts, tweets.label, settings.buckets))
        return cls(*parts)


@dataclass
class CapriccioTraining:
    """A train function bound to one slice. Each call is one try; ``seed`` makes the tries'
    initialisations and shuffles reproducible (None: fresh randomness)."""

    data: SliceData
    settings: ModelSettings = field(default_factory=ModelSettings)
    seed: int | None = None

    def __post_init__(self) -> None:
        self._seeds = np.random.default_rng(self.seed)

    def __call__(self, run: TrainingRun) -> dict[str, float]:
        seed = int(self._seeds.integers(2**31))
        rng = np.random.default_rng(seed)
        with torch.random.fork_rng():  # the caller's torch random state stays untouched
            torch.manual_seed(seed)
            model = TextClassifier(self.settings)
        optimizer = Optimizer(model, self.settings, run.batch_size)
        val_accuracy = 0.0
        for _ in run.epochs():
            for ids, starts, labels in run.steps(batches(self.data.train, run.batch_size, rng)):
                optimizer.step(functional.cross_entropy(model(ids, starts), labels))
            val_accuracy = accuracy(model, self.data.val)
            run.report_metric(val_accuracy)
        return {"val_accuracy": val_accuracy, "epochs": run.epoch}


def train_slice(run: TrainingRun, slice_dir: str, seed: int | None = None) -> dict[str, float]:
    """Train on the slice in ``slice_dir`` (``train.csv``, ``val.csv``): the function to give
    ``ZeusTrainOperator``."""
    settings = ModelSettings()
    return CapriccioTraining(SliceData.from_dir(slice_dir, settings), settings, seed)(run)
