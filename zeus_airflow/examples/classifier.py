"""The small classifier the example DAGs retrain on the CPU: labelled Gaussian clusters, an
MLP, and the loop every train function has.

``fit`` is that loop: each epoch of ``run.epochs()`` feeds its batches through
``run.steps(...)`` (one step each, for the profiler), then reports the validation accuracy
with ``run.report_metric``, which ends the run at the target. A train function built on
another framework does the same through its callback (``zeus_airflow.integrations``).

Train functions import this module inside their body, so that parsing a DAG never imports
PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zeus_airflow.core.common.extras import raise_naming_extra

try:
    import torch
    from torch.utils.data import DataLoader, TensorDataset
except ModuleNotFoundError as err:  # the base install has no torch: name the extra
    raise_naming_extra(err, "the example classifier (zeus_airflow.examples.classifier)")

if TYPE_CHECKING:
    from zeus_airflow.core.train.run import TrainingRun

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]


def clusters(
    centres_seed: int, seed: int, samples: int, *, features: int, classes: int, spread: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``samples`` labelled points: one of ``classes`` centres in ``features`` dimensions plus
    unit Gaussian noise. The centres are drawn with ``centres_seed`` (the same every day) and
    scaled by ``spread`` (a larger one separates the classes better); the sample with
    ``seed``."""
    centres = torch.randn(classes, features, generator=torch.Generator().manual_seed(centres_seed))
    draw = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (samples,), generator=draw)
    return centres[labels] * spread + torch.randn(samples, features, generator=draw), labels


def mlp(features: int, hidden: int, classes: int) -> torch.nn.Module:
    """One hidden ReLU layer."""
    return torch.nn.Sequential(
        torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes)
    )


def fit(
    run: TrainingRun,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch_batches: Callable[[int], Batches],
    validation: tuple[torch.Tensor, torch.Tensor],
    evaluated: torch.nn.Module | None = None,
) -> float:
    """Train ``model`` with cross-entropy on ``epoch_batches(epoch)`` until ``run`` ends it,
    reporting the accuracy on ``validation`` after every epoch; return the last accuracy.
    ``evaluated``: the module to validate when ``model`` wraps it (DistributedDataParallel)."""
    features, labels = validation
    accuracy = 0.0
    for epoch in run.epochs():
        for batch, target in run.steps(epoch_batches(epoch)):
            loss = torch.nn.functional.cross_entropy(model(batch), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            predicted = (evaluated or model)(features).argmax(1)
            accuracy = (predicted == labels).float().mean().item()
        run.report_metric(accuracy)
    return accuracy


@dataclass(frozen=True)
class Task:
    """A classification task retrained from scratch on each day's (or hour's) sample: its
    clusters (:func:`clusters`), sample sizes, the MLP's width, and the learning rate at
    ``base_batch_size``."""

    centres_seed: int
    """Draws the centres: the same every day, so the task stays the same."""
    spread: float
    """Scale of the centres: a larger one separates the classes better (easier)."""
    train_samples: int
    validation_samples: int
    features: int = 32
    classes: int = 8
    hidden: int = 64
    base_learning_rate: float = 0.02
    """At ``base_batch_size``; it grows with the square root of the batch size, so that every
    size gets a fair chance at the target."""
    base_batch_size: int = 32

    def sample(self, seed: int, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
        return clusters(
            self.centres_seed,
            seed,
            samples,
            features=self.features,
            classes=self.classes,
            spread=self.spread,
        )

    def retrain(self, run: TrainingRun, seed: int) -> float:
        """A fresh MLP (initialised from ``seed``) trained at ``run.batch_size`` on the sample
        ``seed`` draws, validated on the one ``seed + 1`` draws; the last accuracy."""
        train_set = TensorDataset(*self.sample(seed, self.train_samples))
        validation = self.sample(seed + 1, self.validation_samples)
        torch.manual_seed(seed)
        model = mlp(self.features, self.hidden, self.classes)
        optimizer = torch.optim.SGD(
            model.parameters(),
            lr=self.base_learning_rate * math.sqrt(run.batch_size / self.base_batch_size),
        )
        loader = DataLoader(train_set, batch_size=run.batch_size, shuffle=True)
        return fit(run, model, optimizer, lambda epoch: loader, validation)
