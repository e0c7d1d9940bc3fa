"""Capriccio's daily slices (paper §6.4).

The corpus is sorted by time. For every calendar day that has tweets, one slice starts at
that day's first tweet and holds the next ``slice_size`` consecutive tweets (500,000 in the
paper, about a month of Sentiment140). Days without tweets start no slice, so no two slices
are identical; days too close to the end for a full slice start none either. Each slice is
split, with a seed fixed per slice, into ``train_size`` training and ``val_size``
validation tweets (425,000 and 75,000 in the paper).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import numpy as np

from zeus_airflow.capriccio.corpus import CorpusError, Tweets, day_of, read_tweets, write_tweets
from zeus_airflow.core.common.config import check_int, check_int_below

PAPER_SLICE_SIZE = 500_000
PAPER_VAL_SIZE = 75_000
DEMO_SLICE_SIZE = 12_000
DEMO_VAL_SIZE = 1_800
"""Demo sizes: the same 85/15 split, small enough that a slice trains in seconds on a CPU."""
DEFAULT_SPLIT_SEED = 0
TRAIN_FILE, VAL_FILE, MANIFEST_FILE = "train.csv", "val.csv", "slice.json"


@dataclass(frozen=True)
class SliceSizes:
    """Tweets per slice and per validation split; the rest of a slice is for training."""

    slice_size: int = PAPER_SLICE_SIZE
    val_size: int = PAPER_VAL_SIZE

    def __post_init__(self) -> None:
        check_int("slice_size", self.slice_size, minimum=2)
        check_int_below(
            "val_size", self.val_size, minimum=1, bound="slice_size", below=self.slice_size
        )

    @property
    def train_size(self) -> int:
        return self.slice_size - self.val_size


@dataclass(frozen=True)
class SliceSpec:
    """Slice ``index`` (0-based): tweets ``[start, start + size)`` of the time-sorted corpus,
    starting with the first tweet of ``day``."""

    index: int
    day: date
    start: int
    size: int

    @property
    def stop(self) -> int:
        return self.start + self.size


def plan_slices(tweets: Tweets, sizes: SliceSizes) -> list[SliceSpec]:
    """Every slice of a time-sorted corpus, oldest first."""
    if len(tweets) < sizes.slice_size:
        raise CorpusError(
            f"the corpus has {len(tweets)} tweets, fewer than one slice "
            f"(slice_size={sizes.slice_size}); expected at least that many"
        )
    if np.any(np.diff(tweets.time_s) < 0):
        raise ValueError("plan_slices needs a time-sorted corpus (Tweets.sorted_by_time)")
    days, firsts = np.unique(tweets.day, return_index=True)
    return [
        SliceSpec(index, day_of(day), int(first), sizes.slice_size)
        for index, (day, first) in enumerate(
            (d, f) for d, f in zip(days, firsts, strict=True) if f + sizes.slice_size <= len(tweets)
        )
    ]


def split_slice(
    spec: SliceSpec, sizes: SliceSizes, seed: int = DEFAULT_SPLIT_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """Corpus indices of the slice's (training, validation) tweets, each in time order.

    The permutation is seeded by ``seed`` and the slice's day, so a slice splits the same way
    whichever corpus file or run it comes from."""
    rng = np.random.default_rng((seed, spec.day.toordinal()))
    order = rng.permutation(spec.size)
    val = np.sort(order[: sizes.val_size]) + spec.start
    train = np.sort(order[sizes.val_size :]) + spec.start
    return train, val


def slice_for_day(slices: list[SliceSpec], day: date) -> SliceSpec | None:
    """The slice starting on ``day``; None for an empty day or one too late for a slice."""
    return next((s for s in slices if s.day == day), None)


def write_slice(
    tweets: Tweets,
    spec: SliceSpec,
    sizes: SliceSizes,
    out_dir: str | Path,
    seed: int = DEFAULT_SPLIT_SEED,
    source: str = "",
) -> Path:
    """Write ``train.csv`` and ``val.csv`` (Sentiment140 format) and ``slice.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, val = split_slice(spec, sizes, seed)
    write_tweets(out / TRAIN_FILE, tweets.take(train))
    write_tweets(out / VAL_FILE, tweets.take(val))
    manifest = {
        **asdict(spec),
        "day": spec.day.isoformat(),
        "train_size": sizes.train_size,
        "val_size": sizes.val_size,
        "split_seed": seed,
        "source": source,
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def prepare_day(
    corpus: str | Path,
    day: date,
    out_root: str | Path,
    sizes: SliceSizes,
    seed: int = DEFAULT_SPLIT_SEED,
) -> Path | None:
    """Write the slice starting on ``day`` under ``out_root/<day>``; None when no slice starts
    that day (a day without tweets, or too late in the corpus for a full slice)."""
    tweets = read_tweets(corpus).sorted_by_time()
    spec = slice_for_day(plan_slices(tweets, sizes), day)
    if spec is None:
        return None
    return write_slice(tweets, spec, sizes, Path(out_root) / day.isoformat(), seed, str(corpus))
