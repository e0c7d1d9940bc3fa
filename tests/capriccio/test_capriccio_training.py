"""The Capriccio model and train function: real PyTorch training through the real engine on
the simulated GPU, the daily run over slices, and ``zeus-airflow capriccio run``."""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures_airflow import TRACES
from usage_errors import assert_usage_error

from zeus_airflow.capriccio.corpus import Tweets
from zeus_airflow.capriccio.experiment import run_capriccio
from zeus_airflow.capriccio.generator import CorpusSpec, generate
from zeus_airflow.capriccio.job import CapriccioJob
from zeus_airflow.capriccio.model import ModelSettings, encode
from zeus_airflow.capriccio.slicing import SliceSizes, plan_slices, split_slice
from zeus_airflow.capriccio.training import CapriccioTraining, SliceData
from zeus_airflow.cli import main
from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.common.traces import load_workload_trace
from zeus_airflow.core.devices.simulated import SimulatedGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine

SIZES = SliceSizes(slice_size=3000, val_size=600)
CORPUS = CorpusSpec(days=12, tweets_per_day=1000, shift_day=4, seed=2)
JOB = CapriccioJob(
    {
        "batch_sizes": (64, 128, 256),
        "default_batch_size": 128,
        "target_metric": 0.85,
        "exploration_budget": None,
    }
)  # the walk's order is what these tests check


@pytest.fixture(scope="module")
def corpus() -> Tweets:
    return generate(CORPUS).sorted_by_time()


def simulated_gpu() -> SimulatedGPU:
    return SimulatedGPU(
        load_workload_trace(TRACES, "v100", "sentiment140"), clock=time.process_time
    )


def test_the_learning_rate_follows_the_square_root_rule() -> None:
    settings = ModelSettings(base_lr=1e-3, base_batch_size=128)
    assert settings.learning_rate(128) == 1e-3
    assert math.isclose(settings.learning_rate(512), 2e-3)
    assert math.isclose(settings.learning_rate(32), 0.5e-3)


def test_encoding_hashes_words_stably_into_bags() -> None:
    first = encode(["Good day", "bad day!", ""], np.array([1, 0, 1]), buckets=1 << 10)
    again = encode(["day good"], np.array([1]), buckets=1 << 10)
    assert first.offsets.tolist() == [0, 2, 4, 5]  # an empty text gets one bucket
    assert sorted(first.ids[:2]) == sorted(again.ids)  # the same word, the same bucket
    assert first.ids[1] == first.ids[3]  # "day" twice
    picked = first.take(np.array([2, 0]))
    assert picked.offsets.tolist() == [0, 1, 3] and picked.labels.tolist() == [1, 1]


def test_one_recurrence_really_trains_to_the_target_on_the_simulated_gpu(corpus: Tweets) -> None:
    spec = plan_slices(corpus, SIZES)[0]
    encoded = encode(corpus.texts, corpus.label, ModelSettings().buckets)
    train, val = split_slice(spec, SIZES)
    gpu = simulated_gpu()
    engine = Engine(SQLStore.in_memory(), gpu, JOB.job_config("t"), seed=1, heartbeat_s=None)
    result = engine.run_recurrence(
        CapriccioTraining(SliceData(encoded.take(train), encoded.take(val)), seed=1),
        RecurrenceKey(run_id="slice-0"),
    )
    assert result.measurement == "simulated" and result.reached_target
    assert result.batch_size == 128 and result.tries[0].phase == "pruning"
    assert result.return_value["val_accuracy"] >= 0.85
    assert result.energy_j > 0 and result.time_s > 0
    # A never-profiled batch size is profiled at every candidate limit, then put back.
    assert gpu.get_power_limits_w() == (250,)


def test_the_daily_run_records_every_slice_and_the_shift(corpus: Tweets) -> None:
    seen = []
    outcomes = run_capriccio(
        corpus,
        SIZES,
        JOB,
        SQLStore.in_memory(),
        simulated_gpu(),
        slices=4,
        shift=CORPUS.shift_date,
        on_slice=seen.append,
    )
    assert seen == outcomes and [o.index for o in outcomes] == [0, 1, 2, 3]
    tried = [o.tried for o in outcomes]
    assert [o.tries[0][0] for o in outcomes[:2]] == [128, 64], tried  # walking down from b0
    # The first run has no early-stop bound yet; later tries may be stopped by it (timing).
    assert outcomes[0].reached_target and outcomes[0].batch_size == 128
    assert all(o.energy_j > 0 and o.time_s > 0 and o.tried for o in outcomes), tried
    shares = [o.post_shift_share for o in outcomes]
    assert shares[0] == 0 and shares[-1] is not None and shares[-1] > 0  # the shift arrives


def test_asking_for_more_slices_than_the_corpus_has_is_named(corpus: Tweets) -> None:
    with pytest.raises(ConfigError, match=r"slices=99 is invalid: the corpus has \d+ slices"):
        run_capriccio(corpus, SIZES, JOB, SQLStore.in_memory(), simulated_gpu(), slices=99)


def test_the_run_command_writes_a_simulated_csv_and_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "capriccio",
            "run",
            "--traces",
            str(TRACES),
            "--days",
            "10",
            "--tweets-per-day",
            "800",
            "--shift-day",
            "5",
            "--slice-size",
            "2500",
            "--val-size",
            "500",
            "--slices",
            "3",
            "--target",
            "0.8",
            "--output-csv",
            str(tmp_path / "run.csv"),
            "--plot",
            str(tmp_path / "p.png"),
        ]
    )
    assert code == 0
    with open(tmp_path / "run.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["slice"] for r in rows] == ["0", "1", "2"]
    assert all(r["measurement"] == "simulated" and float(r["energy_j"]) > 0 for r in rows)
    assert rows[0]["batch_size"] == "128" and rows[0]["tries"] == "128:pruning:target"
    assert (tmp_path / "p.png").stat().st_size > 10_000
    assert "(simulated)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--slices", "500"), "slices=500 is invalid"),
        (("--window", "0"), "window_size=0 is invalid"),
        (("--beta", "1"), "beta=1.0 is invalid"),
        (("--target", "nan"), "target_metric=nan is invalid"),
        (("--gpu", "h100"), "gpu='h100' is invalid"),
        (("--val-size", "0"), "val_size=0 is invalid"),
    ],
)
def test_the_run_command_names_bad_input_before_training(
    tmp_path: Path, args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(
        capsys,
        [
            "capriccio",
            "run",
            "--traces",
            str(TRACES),
            "--days",
            "6",
            "--tweets-per-day",
            "300",
            "--shift-day",
            "none",
            "--output-csv",
            str(tmp_path / "run.csv"),
            "--slice-size",
            "1000",
            "--val-size",
            "200",
            *args,
        ],
        message,
        tmp_path / "run.csv",
    )
