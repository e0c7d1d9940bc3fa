"""Capriccio slicing on a small hand-made Sentiment140 CSV: slice boundaries, skipped empty
days, split sizes, determinism, and every bad input named."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pytest
from usage_errors import assert_usage_error

from zeus_airflow.capriccio.corpus import CorpusError, read_tweets
from zeus_airflow.capriccio.slicing import (
    SliceSizes,
    SliceSpec,
    plan_slices,
    prepare_day,
    slice_for_day,
    split_slice,
    write_slice,
)
from zeus_airflow.cli import main
from zeus_airflow.core.common.config import ConfigError

# Ten tweets over Apr 6, 7, 9 and 10 of 2009 (none on Apr 8), not in time order, as the real
# file is not. Text "tN" is the N-th tweet in time order. The 23:30 PDT tweet of Apr 7 is
# Apr 8 in UTC: calendar days are the tweets' own (local) days.
ROWS = [
    ("4", "7", "Thu Apr 09 08:00:00 PDT 2009", "t5"),
    ("0", "1", "Mon Apr 06 09:00:00 PDT 2009", "t0"),
    ("0", "3", "Mon Apr 06 21:15:00 PDT 2009", "t2"),
    ("4", "2", "Mon Apr 06 12:30:00 PDT 2009", "t1"),
    ("0", "5", "Tue Apr 07 23:30:00 PDT 2009", "t4"),
    ("4", "4", "Tue Apr 07 06:00:00 PDT 2009", "t3"),
    ("0", "10", "Fri Apr 10 18:00:00 PDT 2009", "t9"),
    ("4", "8", "Thu Apr 09 12:00:00 PDT 2009", "t6"),
    ("0", "9", "Fri Apr 10 07:00:00 PDT 2009", "t8"),
    ("4", "11", "Thu Apr 09 12:00:00 PDT 2009", "t7"),  # same second as t6: file order
]
SIZES = SliceSizes(slice_size=4, val_size=1)


def write_csv(path: Path, rows: list[tuple[str, ...]], header: str | None = None) -> Path:
    lines = [header] if header else []
    lines += [",".join(f'"{field}"' for field in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")
    return path


def corpus_rows(rows: list[tuple[str, str, str, str]] = ROWS) -> list[tuple[str, ...]]:
    return [(s, i, d, "NO_QUERY", f"user{i}", text) for s, i, d, text in rows]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "corpus.csv", corpus_rows())


def test_tweets_are_sorted_by_time_with_local_calendar_days(corpus: Path) -> None:
    tweets = read_tweets(corpus).sorted_by_time()
    assert tweets.texts == [f"t{i}" for i in range(10)]
    assert tweets.label.tolist() == [0, 1, 0, 1, 0, 1, 1, 1, 0, 0]
    assert str(tweets.day[4]) == "2009-04-07"  # 23:30 PDT, already Apr 8 in UTC
    assert tweets.time_s[4] - tweets.time_s[3] == (17 * 60 + 30) * 60


def test_one_slice_per_day_from_its_first_tweet_skipping_empty_days(corpus: Path) -> None:
    slices = plan_slices(read_tweets(corpus).sorted_by_time(), SIZES)
    assert slices == [
        SliceSpec(0, date(2009, 4, 6), start=0, size=4),
        SliceSpec(1, date(2009, 4, 7), start=3, size=4),
        SliceSpec(2, date(2009, 4, 9), start=5, size=4),  # Apr 8 had no tweet: no slice
    ]  # Apr 10 starts at tweet 8: too few tweets left for a slice of 4
    assert slice_for_day(slices, date(2009, 4, 8)) is None
    assert slice_for_day(slices, date(2009, 4, 9)) == slices[2]


def test_each_slice_splits_into_disjoint_train_and_validation_sets(corpus: Path) -> None:
    slices = plan_slices(read_tweets(corpus).sorted_by_time(), SIZES)
    for spec in slices:
        train, val = split_slice(spec, SIZES)
        assert (len(train), len(val)) == (SIZES.train_size, SIZES.val_size) == (3, 1)
        assert sorted([*train, *val]) == list(range(spec.start, spec.stop))


def test_the_split_is_fixed_by_its_seed_and_the_slice_day(corpus: Path) -> None:
    tweets = read_tweets(corpus).sorted_by_time()
    big = SliceSizes(slice_size=10, val_size=4)
    (spec,) = plan_slices(tweets, big)
    first = split_slice(spec, big, seed=7)
    assert all(
        np.array_equal(a, b) for a, b in zip(first, split_slice(spec, big, seed=7), strict=True)
    )
    others = {tuple(split_slice(spec, big, seed=s)[1]) for s in range(8)}
    assert len(others) > 1  # another seed gives another split


def test_a_written_slice_reads_back_with_its_split_and_manifest(
    corpus: Path, tmp_path: Path
) -> None:
    tweets = read_tweets(corpus).sorted_by_time()
    spec = plan_slices(tweets, SIZES)[1]
    out = write_slice(tweets, spec, SIZES, tmp_path / "slice")
    train, val = read_tweets(out / "train.csv"), read_tweets(out / "val.csv")
    assert sorted(train.texts + val.texts) == ["t3", "t4", "t5", "t6"]
    assert len(val) == 1 and '"day": "2009-04-07"' in (out / "slice.json").read_text()
    assert prepare_day(corpus, date(2009, 4, 8), tmp_path / "days", SIZES) is None
    again = prepare_day(corpus, date(2009, 4, 7), tmp_path / "days", SIZES)
    assert again is not None and read_tweets(again / "val.csv").texts == val.texts


def test_a_header_row_may_name_the_columns_in_any_order(tmp_path: Path, corpus: Path) -> None:
    reordered = [(r[5], r[2], r[0], r[1], r[3], r[4]) for r in corpus_rows()]
    path = write_csv(
        tmp_path / "with_header.csv", reordered, header="text,date,target,ids,flag,user"
    )
    assert read_tweets(path).sorted_by_time().texts == read_tweets(corpus).sorted_by_time().texts


@pytest.mark.parametrize(
    ("rows", "header", "message"),
    [
        (
            [("0", "1", "Mon Apr 06 09:00:00 PDT 2009", "NO_QUERY", "u")],
            None,
            r"corpus.csv:1: 5 columns; expected 6: sentiment, id, date, query, user, text",
        ),
        (
            [("0", "1", "NO_QUERY", "u", "hi")],
            "sentiment,id,query,user,text",
            r"corpus.csv:1: missing column\(s\) date",
        ),
        (
            [*corpus_rows()[:2], ("0", "9", "Mon Foo 06 09:00:00 PDT 2009", "q", "u", "x")],
            None,
            r"corpus.csv:3: date='Mon Foo 06 09:00:00 PDT 2009' is unparsable",
        ),
        (
            [("0", "9", "Mon Apr 06 09:00:00 CEST 2009", "q", "u", "x")],
            None,
            r"corpus.csv:1: date=.* is unparsable: .* zone in PDT, PST, UTC, GMT",
        ),
        (
            [*corpus_rows()[:3], ("2", "9", "Mon Apr 06 09:00:00 PDT 2009", "q", "u", "x")],
            None,
            r"corpus.csv:4: sentiment='2' is invalid: expected 0 \(negative\) or 4 \(positive\)",
        ),
    ],
)
def test_bad_rows_are_named_by_line_and_column(
    tmp_path: Path, rows: list[tuple[str, ...]], header: str | None, message: str
) -> None:
    with pytest.raises(CorpusError, match=message):
        read_tweets(write_csv(tmp_path / "corpus.csv", rows, header))


def test_fewer_tweets_than_one_slice_is_an_error(corpus: Path) -> None:
    with pytest.raises(
        CorpusError,
        match="the corpus has 10 tweets, fewer than one slice "
        r"\(slice_size=11\)",
    ):
        plan_slices(read_tweets(corpus).sorted_by_time(), SliceSizes(11, 1))


@pytest.mark.parametrize(
    ("slice_size", "val_size", "message"),
    [
        (1, 1, "slice_size=1 is invalid"),
        (10, 10, r"val_size=10 is invalid: expected an integer in \[1, slice_size=10\)"),
        (10, 0, "val_size=0 is invalid"),
    ],
)
def test_bad_sizes_are_named(slice_size: int, val_size: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SliceSizes(slice_size, val_size)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"corpus=.*nope\.csv' is invalid: no such file"):
        read_tweets(tmp_path / "nope.csv")


def test_the_slice_command_writes_folders_by_day(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "capriccio",
                "slice",
                "--corpus",
                str(corpus),
                "--output-dir",
                str(tmp_path / "out"),
                "--slice-size",
                "4",
                "--val-size",
                "1",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "2009-04-06",
        "2009-04-07",
        "2009-04-09",
    ]
    assert "slice   2  2009-04-09" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--day", "2009-04-08"), "day=2009-04-08 is invalid: no slice starts on it"),
        (("--val-size", "4"), "val_size=4 is invalid"),
    ],
)
def test_the_slice_command_names_bad_input(
    corpus: Path,
    tmp_path: Path,
    args: tuple[str, ...],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert_usage_error(
        capsys,
        [
            "capriccio",
            "slice",
            "--corpus",
            str(corpus),
            "--output-dir",
            str(tmp_path / "out"),
            "--slice-size",
            "4",
            "--val-size",
            "1",
            *args,
        ],
        message,
        tmp_path / "out",
    )


def test_the_slice_command_names_a_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write_csv(
        tmp_path / "bad.csv", [("1", "1", "Mon Apr 06 09:00:00 PDT 2009", "q", "u", "x")]
    )
    with pytest.raises(SystemExit):
        main(["capriccio", "slice", "--corpus", str(bad), "--output-dir", str(tmp_path / "o")])
    assert "bad.csv:1: sentiment='1' is invalid" in capsys.readouterr().err
