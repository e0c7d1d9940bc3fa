"""A synthetic Sentiment140-format corpus that drifts day by day, for demos and tests.

The real Capriccio source (Sentiment140, 1.6 M tweets) cannot be downloaded on every machine;
this generator writes a file of the same schema whose statistics move the way real tweets'
do, so slicing, retraining and the drift-aware bandit can be exercised end to end:

- **label balance**: the share of positive tweets follows a slow wave plus a random walk;
- **topics**: each day's topic mixture is a random walk; topics lean positive or negative,
  so the words that predict sentiment shift with the mixture;
- **vocabulary**: sentiment words have a lifetime (they come into use, peak, fade), so the
  lexicon turns over gradually;
- **abrupt shift** (``shift_day``): from that day half of the sentiment words come from a new,
  larger lexicon (new slang: words never seen before, each rarer), other topics become
  popular, and the label balance jumps. Until enough post-shift tweets have accumulated in a
  slice, the new words are barely learnable, so retraining needs more epochs.

Words are made-up syllable strings, apart from common English function words. Everything is
drawn from one seeded generator, so a spec always yields the same file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np

from zeus_airflow.capriccio.corpus import TIMEZONES_H, Tweets, format_date, write_tweets
from zeus_airflow.core.common.config import ConfigError

FUNCTION_WORDS = (
    "i",
    "the",
    "to",
    "a",
    "my",
    "and",
    "you",
    "is",
    "it",
    "in",
    "for",
    "of",
    "on",
    "me",
    "so",
    "have",
    "that",
    "but",
    "just",
    "with",
    "at",
    "be",
    "this",
    "was",
    "not",
    "now",
    "today",
    "get",
    "go",
    "got",
    "going",
    "all",
    "up",
    "out",
    "im",
    "lol",
    "day",
    "too",
    "back",
    "about",
)
FIRST_ID = 1_467_810_369
"""The first id of the real file, so generated ids look alike."""
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


@dataclass(frozen=True)
class Era:
    """The language of tweets before or after the shift."""

    sentiment_rate: float
    """Share of a tweet's words that carry its sentiment."""
    label_noise: float
    """Share of tweets whose label disagrees with the sentiment of their words."""
    balance_offset: float
    """Added to the share of positive tweets."""
    sentiment_words: int
    """Words per polarity of the era's own lexicon: more words, each rarer, take more updates
    to learn."""
    carried_over: float = 0.0
    """Share of sentiment words still drawn from the previous era's lexicon."""


@dataclass(frozen=True)
class CorpusSpec:
    """What to generate. Days are counted from ``first_day`` (day 0). The defaults give 38
    slices at the demo slice sizes, as many as the paper's Capriccio has."""

    days: int = 50
    tweets_per_day: int = 1800
    """Mean tweets on a day with tweets (days vary by about +-20 %)."""
    empty_day_share: float = 0.12
    """Share of days without a single tweet (Sentiment140 has such gaps)."""
    shift_day: int | None = 26
    """Day of the abrupt shift; None for gradual drift only."""
    first_day: date = date(2009, 4, 6)
    seed: int = 0
    topics: int = 12
    words_per_topic: int = 60
    word_lifetime_days: int = 40
    before: Era = field(default_factory=lambda: Era(0.25, 0.06, 0.0, 40))
    after: Era = field(default_factory=lambda: Era(0.25, 0.06, -0.1, 60, carried_over=0.5))

    def __post_init__(self) -> None:
        _require(
            isinstance(self.days, int) and self.days >= 1, "days", self.days, "an integer >= 1"
        )
        _require(
            isinstance(self.tweets_per_day, int) and self.tweets_per_day >= 1,
            "tweets_per_day",
            self.tweets_per_day,
            "an integer >= 1",
        )
        _require(
            0.0 <= self.empty_day_share < 1.0,
            "empty_day_share",
            self.empty_day_share,
            "a number in [0, 1)",
        )
        _require(
            self.shift_day is None
            or (isinstance(self.shift_day, int) and 1 <= self.shift_day < self.days),
            "shift_day",
            self.shift_day,
            f"None or an integer in [1, days={self.days})",
        )

    @property
    def shift_date(self) -> date | None:
        return None if self.shift_day is None else self.first_day + timedelta(self.shift_day)

    def empty_days(self, rng: np.random.Generator) -> set[int]:
        """Days without tweets: ``empty_day_share`` of them, never the first nor the shift."""
        candidates = [d for d in range(1, self.days) if d != self.shift_day]
        count = min(round(self.empty_day_share * self.days), len(candidates))
        return {int(d) for d in rng.choice(candidates, count, replace=False)}


def generate(spec: CorpusSpec) -> Tweets:
    """The corpus, in the real file's order: every negative tweet, then every positive one,
    each group in time order (so readers must sort by time themselves)."""
    rng = np.random.default_rng(spec.seed)
    language = _Language(spec, rng)
    empty = spec.empty_days(rng)
    days: list[Tweets] = []
    for day in range(spec.days):
        count = (
            0
            if day in empty
            else max(1, round(spec.tweets_per_day * math.exp(rng.normal(0.0, 0.2))))
        )
        language.advance(day)
        if count:
            days.append(language.tweets(day, count, rng))
    corpus = _concat(days)
    order = np.lexsort((np.arange(len(corpus)), corpus.label))
    return corpus.take(order)


def write_corpus(spec: CorpusSpec, path: str | Path) -> Tweets:
    """Generate and write a corpus; returns it."""
    tweets = generate(spec)
    write_tweets(path, tweets)
    return tweets


def ensure_corpus(path: str | Path, spec: CorpusSpec | None = None) -> Path:
    """The corpus at ``path``, generated first if missing. Written under a temporary name and
    renamed, so a concurrent reader never sees half a file."""
    path = Path(path)
    if not path.exists():
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        write_corpus(spec or CorpusSpec(), partial)
        partial.replace(path)
    return path


class _Language:
    """Vocabularies of both eras and the day-by-day state of the drifting distribution."""

    def __init__(self, spec: CorpusSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self.eras = (spec.before, spec.after)
        per_topics = spec.topics * spec.words_per_topic
        words = iter(
            _unique_words(rng, per_topics + sum(2 * era.sentiment_words for era in self.eras))
        )
        self.topic_words = np.array([next(words) for _ in range(per_topics)]).reshape(
            spec.topics, -1
        )
        self.sentiment_words = [
            np.array([next(words) for _ in range(2 * era.sentiment_words)]).reshape(2, -1)
            for era in self.eras
        ]
        era_days = [spec.shift_day or spec.days, spec.days - (spec.shift_day or spec.days)]
        # Birth days spread each era's words over the era, starting a lifetime early so the
        # first days already have a full lexicon.
        self.births = [
            rng.uniform(-spec.word_lifetime_days, max(days, 1), (2, era.sentiment_words))
            for era, days in zip(self.eras, era_days, strict=True)
        ]
        self.topic_bias = rng.normal(0.0, 1.0, spec.topics)
        """How much each topic leans positive (logit)."""
        self.topic_logits = rng.normal(0.0, 1.0, spec.topics)
        self.balance_walk = 0.0
        self.phase = rng.uniform(0, 2 * math.pi)
        self._rng = rng

    def era(self, day: int) -> int:
        shift = self.spec.shift_day
        return 1 if shift is not None and day >= shift else 0

    def advance(self, day: int) -> None:
        """Move the random walks to ``day``; at the shift, new topics become popular."""
        rng = self._rng
        if day == self.spec.shift_day:
            self.topic_logits = rng.normal(0.0, 1.0, self.spec.topics)
        self.topic_logits = self.topic_logits + rng.normal(0.0, 0.25, self.spec.topics)
        self.balance_walk = 0.9 * self.balance_walk + rng.normal(0.0, 0.02)

    def positive_share(self, day: int) -> float:
        era = self.eras[self.era(day)]
        wave = 0.1 * math.sin(2 * math.pi * day / 23 + self.phase)
        return min(max(0.5 + wave + self.balance_walk + era.balance_offset, 0.2), 0.8)

    def tweets(self, day: int, count: int, rng: np.random.Generator) -> Tweets:
        spec, era_index = self.spec, self.era(day)
        era = self.eras[era_index]
        mix = np.exp(self.topic_logits - self.topic_logits.max())
        topic = rng.choice(spec.topics, count, p=mix / mix.sum())
        base = math.log(self.positive_share(day) / (1 - self.positive_share(day)))
        p_positive = 1 / (1 + np.exp(-(base + self.topic_bias[topic])))
        sentiment = (rng.random(count) < p_positive).astype(np.int8)
        flipped = rng.random(count) < era.label_noise
        label = np.where(flipped, 1 - sentiment, sentiment).astype(np.int8)
        lengths = 4 + rng.poisson(8, count)
        owner = np.repeat(np.arange(count), lengths)
        kind = rng.random(owner.size)
        words = rng.choice(FUNCTION_WORDS, owner.size, p=_zipf(len(FUNCTION_WORDS)))
        is_topic = kind < 0.35
        topic_words = self.topic_words[topic[owner[is_topic]]]
        columns = rng.choice(spec.words_per_topic, is_topic.sum(), p=_zipf(spec.words_per_topic))
        words[is_topic] = topic_words[np.arange(len(columns)), columns]
        is_sentiment = kind > 1 - era.sentiment_rate
        lexicon = np.where(rng.random(owner.size) < era.carried_over, era_index - 1, era_index)
        for source in {era_index, max(era_index - 1, 0)}:
            for polarity in (0, 1):
                where = np.flatnonzero(
                    is_sentiment & (lexicon == source) & (sentiment[owner] == polarity)
                )
                picks = rng.choice(
                    self.eras[source].sentiment_words,
                    where.size,
                    p=self._lexicon_weights(source, polarity, day),
                )
                words[where] = self.sentiment_words[source][polarity][picks]
        texts = [" ".join(w) for w in np.split(words, np.cumsum(lengths)[:-1])]
        seconds = np.sort(rng.integers(0, 86_400, count))
        return _day_tweets(spec.first_day + timedelta(days=day), seconds, label, texts, rng)

    def _lexicon_weights(self, era: int, polarity: int, day: int) -> np.ndarray:
        """Use of each sentiment word on ``day``: a tent over its lifetime (rises, fades)."""
        age = (day - self.births[era][polarity]) / self.spec.word_lifetime_days
        weights = np.clip(1 - np.abs(2 * age - 1), 0.0, None) + 1e-3
        return weights / weights.sum()


def _day_tweets(
    day: date, seconds: np.ndarray, label: np.ndarray, texts: list[str], rng: np.random.Generator
) -> Tweets:
    """One day's tweets at local (PDT) times ``seconds`` after midnight."""
    midnight = datetime(day.year, day.month, day.day)
    local = [midnight + timedelta(seconds=int(s)) for s in seconds]
    dates = [format_date(t) for t in local]
    utc_midnight = (
        int((midnight - datetime(1970, 1, 1)).total_seconds()) - TIMEZONES_H["PDT"] * 3600
    )
    count = len(texts)
    users = [f"user{u}" for u in rng.integers(0, 50_000, count)]
    return Tweets(
        label,
        utc_midnight + seconds.astype(np.int64),
        np.full(count, np.datetime64(day, "D")),
        [""] * count,
        dates,
        ["NO_QUERY"] * count,
        users,
        texts,
    )


def _concat(parts: list[Tweets]) -> Tweets:
    ids = [str(FIRST_ID + i) for i in range(sum(len(p) for p in parts))]
    return Tweets(
        np.concatenate([p.label for p in parts]),
        np.concatenate([p.time_s for p in parts]),
        np.concatenate([p.day for p in parts]),
        ids,
        [d for p in parts for d in p.dates],
        [q for p in parts for q in p.queries],
        [u for p in parts for u in p.users],
        [t for p in parts for t in p.texts],
    )


def _unique_words(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` distinct made-up words of 2-4 syllables, none an English function word."""
    found: dict[str, None] = {}
    taken = set(FUNCTION_WORDS)
    while len(found) < count:
        word = "".join(rng.choice(_SYLLABLES, rng.integers(2, 5)))
        if word not in taken:
            found[word] = None
    return list(found)


def _zipf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1)
    return weights / weights.sum()


def _require(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: expected {allowed}")
