"""The synthetic Capriccio corpus: Sentiment140's schema, reproducible, and drifting
measurably day by day, with an abrupt shift on the given day."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest

from zeus_airflow.capriccio.corpus import Tweets, read_tweets
from zeus_airflow.capriccio.generator import FUNCTION_WORDS, CorpusSpec, generate, write_corpus
from zeus_airflow.capriccio.slicing import DEMO_SLICE_SIZE, DEMO_VAL_SIZE, SliceSizes, plan_slices
from zeus_airflow.cli import main
from zeus_airflow.core.common.config import ConfigError

SPEC = CorpusSpec(days=30, tweets_per_day=400, shift_day=18, seed=5)


@pytest.fixture(scope="module")
def corpus() -> Tweets:
    return generate(SPEC).sorted_by_time()


def by_day(tweets: Tweets) -> dict[date, np.ndarray]:
    days = {}
    for day in np.unique(tweets.day):
        days[day.astype(object)] = np.flatnonzero(tweets.day == day)
    return days


def vocabulary(tweets: Tweets, rows: np.ndarray) -> set[str]:
    """Content words: the function words every day shares are left out."""
    words = {w for i in rows for w in tweets.texts[i].split()}
    return words - set(FUNCTION_WORDS)


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b)


def test_the_file_has_sentiment140s_schema_and_order(tmp_path: Path) -> None:
    path = tmp_path / "corpus.csv"
    written = write_corpus(SPEC, path)
    first = path.read_text(encoding="latin-1").splitlines()[0].split('","')
    assert len(first) == 6 and first[0] == '"0' and first[3] == "NO_QUERY"
    assert first[2].endswith("PDT 2009")
    back = read_tweets(path)
    assert back.texts == written.texts and back.label.tolist() == written.label.tolist()
    # Like the real file: every negative tweet first, so readers must sort by time.
    assert back.label.tolist() == sorted(back.label.tolist())
    assert np.any(np.diff(back.time_s) < 0)


def test_the_same_spec_gives_the_same_corpus_and_another_seed_another(corpus: Tweets) -> None:
    assert generate(SPEC).sorted_by_time().texts == corpus.texts
    other = generate(CorpusSpec(days=30, tweets_per_day=400, shift_day=18, seed=6))
    assert other.sorted_by_time().texts[:50] != corpus.texts[:50]


def test_some_days_are_empty_but_never_the_first_or_the_shift_day(corpus: Tweets) -> None:
    days = set(by_day(corpus))
    assert SPEC.first_day in days and SPEC.shift_date in days
    assert len(days) == SPEC.days - round(SPEC.empty_day_share * SPEC.days) < SPEC.days
    assert max(days) <= SPEC.first_day + timedelta(SPEC.days - 1)


def test_the_label_balance_drifts_from_day_to_day(corpus: Tweets) -> None:
    shares = [corpus.label[rows].mean() for rows in by_day(corpus).values()]
    assert max(shares) - min(shares) > 0.15
    assert min(shares) >= 0.2 and max(shares) <= 0.8


def test_the_vocabulary_turns_over_gradually_and_abruptly_at_the_shift(corpus: Tweets) -> None:
    days = by_day(corpus)
    shift = SPEC.shift_date
    assert shift is not None
    vocab = {d: vocabulary(corpus, rows) for d, rows in days.items()}
    before = [d for d in sorted(days) if d < shift]
    # Gradual: a day shares more words with the day before than with a day weeks earlier.
    assert jaccard(vocab[before[-2]], vocab[before[-1]]) > jaccard(
        vocab[before[0]], vocab[before[-1]]
    )
    # Abrupt: the shift day brings a burst of words never seen before (the new lexicon).
    seen: set[str] = set()
    novel = {}
    for day in sorted(days):
        novel[day] = len(vocab[day] - seen) / len(vocab[day])
        seen |= vocab[day]
    settled = [novel[d] for d in before[7:]]  # after the first week's vocabulary has appeared
    assert novel[shift] > 0.1 and novel[shift] > 5 * max(settled)


def test_the_defaults_give_the_papers_38_slices_at_demo_sizes() -> None:
    tweets = generate(CorpusSpec()).sorted_by_time()
    assert len(plan_slices(tweets, SliceSizes(DEMO_SLICE_SIZE, DEMO_VAL_SIZE))) == 38


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"days": 0}, "days=0 is invalid"),
        (
            {"shift_day": 30},
            r"shift_day=30 is invalid: expected None or an integer in \[1, "
            r"days=30\)",
        ),
        ({"empty_day_share": 1.0}, "empty_day_share=1.0 is invalid"),
        ({"tweets_per_day": 0}, "tweets_per_day=0 is invalid"),
    ],
)
def test_bad_specs_are_named(changes: dict[str, object], message: str) -> None:
    values: dict[str, object] = {"days": 30, **changes}
    with pytest.raises(ConfigError, match=message):
        CorpusSpec(**values)  # type: ignore[arg-type]


def test_the_generate_command_writes_the_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c.csv"
    assert (
        main(
            [
                "capriccio",
                "generate",
                "--output",
                str(out),
                "--days",
                "6",
                "--tweets-per-day",
                "50",
                "--shift-day",
                "none",
            ]
        )
        == 0
    )
    assert len(read_tweets(out)) > 100
    assert "abrupt shift on no day" in capsys.readouterr().out
