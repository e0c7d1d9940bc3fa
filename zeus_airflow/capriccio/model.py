"""A small PyTorch text classifier that trains on a CPU in seconds per slice.

Tweets become hashed bags of words (the "hashing trick": a word's bucket is a stable CRC32 of
it, so no vocabulary is built or shipped and unseen words still land somewhere); an
``EmbeddingBag`` averages the words' vectors and a small MLP predicts the sentiment. The
learning rate follows the square-root rule for Adam-family optimisers the paper used when it
scaled batch sizes (§6.1): ``lr(b) = base_lr * sqrt(b / base_batch_size)``.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from zeus_airflow.core.common.extras import raise_naming_extra

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:  # the base install has no torch: name the extra
    raise_naming_extra(err, "Capriccio training (zeus_airflow.capriccio.model)")

_WORD = re.compile(r"[a-z0-9']+")


@dataclass(frozen=True)
class ModelSettings:
    """Model size and optimiser settings; the defaults suit the synthetic demo corpus."""

    buckets: int = 1 << 15
    """Hash buckets of the bag of words."""
    dim: int = 64
    """Width of the word vectors."""
    hidden: int = 256
    """Width of the two hidden layers: per-tweet compute, so that large batches stop paying
    off the way they do on a saturated GPU (a bare bag of words is all per-step overhead)."""
    base_lr: float = 3e-4
    """Adam learning rate at ``base_batch_size``."""
    base_batch_size: int = 128
    weight_decay: float = 1e-4

    def learning_rate(self, batch_size: int) -> float:
        """Square-root scaling for Adam-family optimisers."""
        return self.base_lr * math.sqrt(batch_size / self.base_batch_size)


@dataclass(frozen=True)
class Encoded:
    """Tweets as hashed word ids, in CSR form: tweet i's ids are
    ``ids[offsets[i]:offsets[i + 1]]``; ``labels`` are 0 (negative) or 1 (positive)."""

    offsets: np.ndarray
    ids: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, rows: np.ndarray) -> Encoded:
        """The tweets at ``rows``, in that order."""
        starts, lengths = self.offsets[rows], np.diff(self.offsets)[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
        return Encoded(offsets, self.ids[np.repeat(starts, lengths) + within], self.labels[rows])


def encode(texts: Sequence[str], labels: np.ndarray, buckets: int) -> Encoded:
    """Hash every word of every text; a text without words gets bucket 0, so no bag is
    empty."""
    cache: dict[str, int] = {}
    ids: list[int] = []
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    for i, text in enumerate(texts):
        words = _WORD.findall(text.lower()) or [""]
        for word in words:
            bucket = cache.get(word)
            if bucket is None:
                bucket = cache[word] = zlib.crc32(word.encode()) % buckets
            ids.append(bucket)
        offsets[i + 1] = len(ids)
    return Encoded(offsets, np.array(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64))


def batches(
    data: Encoded, batch_size: int, rng: np.random.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """One epoch of shuffled (word ids, bag offsets, labels) batches; the last may be short."""
    shuffled = data.take(rng.permutation(len(data)))
    ids, labels = torch.from_numpy(shuffled.ids), torch.from_numpy(shuffled.labels)
    for first in range(0, len(shuffled), batch_size):
        last = min(first + batch_size, len(shuffled))
        lo, hi = shuffled.offsets[first], shuffled.offsets[last]
        bag_starts = torch.from_numpy(shuffled.offsets[first:last] - lo)
        yield ids[lo:hi], bag_starts, labels[first:last]


class TextClassifier(nn.Module):
    """Mean of hashed word vectors -> one hidden layer -> two logits."""

    def __init__(self, settings: ModelSettings) -> None:
        super().__init__()
        # Sparse gradients: a step updates only the rows of the words in its batch, not all
        # ``buckets`` rows, which keeps small-batch steps cheap.
        self.bag = nn.EmbeddingBag(settings.buckets, settings.dim, mode="mean", sparse=True)
        self.head = nn.Sequential(
            nn.Linear(settings.dim, settings.hidden),
            nn.ReLU(),
            nn.Linear(settings.hidden, settings.hidden),
            nn.ReLU(),
            nn.Linear(settings.hidden, 2),
        )

    def forward(self, ids: torch.Tensor, bag_starts: torch.Tensor) -> torch.Tensor:
        return self.head(self.bag(ids, bag_starts))


class Optimizer:
    """SparseAdam for the word vectors, AdamW for the rest, both at the scaled rate."""

    def __init__(self, model: TextClassifier, settings: ModelSettings, batch_size: int) -> None:
        lr = settings.learning_rate(batch_size)
        self._parts = [
            torch.optim.SparseAdam(list(model.bag.parameters()), lr=lr),
            torch.optim.AdamW(model.head.parameters(), lr=lr, weight_decay=settings.weight_decay),
        ]

    def step(self, loss: torch.Tensor) -> None:
        for part in self._parts:
            part.zero_grad()
        loss.backward()
        for part in self._parts:
            part.step()


@torch.no_grad()
def accuracy(model: TextClassifier, data: Encoded, batch_size: int = 4096) -> float:
    """Share of ``data`` classified correctly, in [0, 1]."""
    model.eval()
    correct = 0
    for ids, starts, labels in batches(data, batch_size, np.random.default_rng(0)):
        correct += int((model(ids, starts).argmax(dim=1) == labels).sum())
    model.train()
    return correct / len(data)
