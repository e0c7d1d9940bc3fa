"""ZeusTrainerCallback with the real ``transformers`` Trainer on the CPU: a BERT of one tiny
layer built from a config (no download), synthetic token sequences, a fake NVML GPU."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from fixtures_frameworks import CANDIDATES, ORIGINAL_W, Try, job, one_recurrence, one_try

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.train.run import TrainContractError, TrainingRun
from zeus_airflow.integrations.huggingface import ZeusTrainerCallback

VOCAB, LENGTH, SAMPLES = 24, 8, 64
MARKER = 3
"""A sequence's label is whether it holds this token."""


@pytest.fixture(autouse=True)
def _cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    torch.set_num_threads(1)


class Sequences(torch.utils.data.Dataset):  # type: ignore[misc]
    """Random token sequences, half of them holding MARKER."""

    def __init__(self, samples: int, seed: int) -> None:
        draw = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(4, VOCAB, (samples, LENGTH), generator=draw)
        self.labels = torch.arange(samples) % 2
        self.ids[self.labels == 1, 0] = MARKER

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(LENGTH, dtype=torch.long),
            "labels": self.labels[i],
        }


def tiny_bert() -> Any:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=LENGTH,
        num_labels=2,
    )
    return transformers.BertForSequenceClassification(config)


def hf_train(
    tmp_path: Path,
    *,
    metrics: Callable[[int], dict[str, float]] | None = None,
    accumulation: int = 1,
    metric: str = "accuracy",
    eval_strategy: str = "epoch",
    seen: list[int] | None = None,
    fail_at_step: int | None = None,
    arguments: dict[str, Any] | None = None,
) -> Callable[[TrainingRun], Any]:
    """A train function as a user writes it around a Trainer. ``metrics(epoch)`` scripts the
    evaluation's metric (default: real accuracy); ``seen`` collects each micro-batch's size;
    ``fail_at_step`` makes the model's forward raise at that Trainer step."""

    def collate(features: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if seen is not None:
            seen.append(len(features))
        return {key: torch.stack([f[key] for f in features]) for key in features[0]}

    def train(run: TrainingRun) -> Any:
        model = tiny_bert()
        args = transformers.TrainingArguments(
            str(tmp_path / "out"),
            eval_strategy=eval_strategy,
            eval_steps=2,
            gradient_accumulation_steps=accumulation,
            learning_rate=5e-3,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            use_cpu=True,
            per_device_eval_batch_size=SAMPLES,
            seed=0,
            **(arguments or {}),
        )
        zeus = ZeusTrainerCallback(run, args, metric=metric)

        def compute_metrics(prediction: Any) -> dict[str, float]:
            if metrics is not None:
                return metrics(run.epoch)
            predicted = prediction.predictions.argmax(-1)
            return {"accuracy": float((predicted == prediction.label_ids).mean())}

        trainer = transformers.Trainer(
            model=model,
            args=args,
            data_collator=collate,
            train_dataset=Sequences(SAMPLES, 1),
            eval_dataset=Sequences(SAMPLES // 2, 2),
            compute_metrics=compute_metrics,
            callbacks=[zeus],
        )
        if fail_at_step is not None:

            def diverge(module: Any, inputs: Any) -> None:
                if module.training and trainer.state.global_step >= fail_at_step:
                    raise FloatingPointError(f"loss is nan at step {trainer.state.global_step}")

            model.register_forward_pre_hook(diverge)
        trainer.train()
        return trainer

    return train


def test_the_global_batch_size_reaches_the_dataloader_per_device(tmp_path: Path) -> None:
    """b=16 with 2 accumulation steps on one CPU process: micro-batches of 8."""
    seen: list[int] = []
    done = one_try(hf_train(tmp_path, accumulation=2, seen=seen), job(max_epochs=1), 16)

    trainer = done.returned
    assert trainer.args.per_device_train_batch_size == 8
    # The epoch's 8 micro-batches, then the evaluation's one batch.
    assert seen == [8] * (SAMPLES // 8) + [SAMPLES // 2]
    assert done.outcome is not None and done.outcome.batch_size == 16


def test_profiles_the_power_limits_over_the_first_steps(tmp_path: Path) -> None:
    """64 samples at b=8: 8 Trainer steps an epoch; 3 epochs cover the 9 limits' 18 steps,
    more than the search needs."""
    done = one_try(hf_train(tmp_path), job(max_epochs=3), 8)

    assert done.outcome is not None
    profile = done.run.profiler.profile
    assert done.limits_set_w()[0] == 300  # the maximum first, then the search...
    assert profile.complete and 1 < len(profile.measurements) <= CANDIDATES
    assert set(done.limits_set_w()) >= set(profile.measurements)
    assert done.run.profiler.optimal_power_limit_w == done.outcome.power_limit_w
    assert done.fake.limits_mw() == [ORIGINAL_W * 1000]  # ...and the original put back
    assert done.outcome.epochs == 3 and done.outcome.stop_reason == "max_epochs"
    assert done.returned.state.epoch == pytest.approx(3.0)


def test_stops_at_the_target_through_the_trainers_control(tmp_path: Path) -> None:
    scripted = {1: 0.4, 2: 0.7, 3: 0.95, 4: 0.99}
    done = one_try(
        hf_train(tmp_path, metrics=lambda epoch: {"accuracy": scripted[epoch]}),
        job(target=0.9, max_epochs=4),
        16,
    )

    assert done.outcome is not None
    assert (done.outcome.stop_reason, done.outcome.epochs) == ("target", 3)
    assert done.outcome.reached_target and done.outcome.last_metric == 0.95
    assert done.returned.state.epoch == pytest.approx(3.0)  # the Trainer stopped there


def test_stops_at_the_early_stop_bound(tmp_path: Path) -> None:
    """A bound below one epoch's cost: the run stops after its first epoch, not at 4."""
    done = one_try(hf_train(tmp_path), job(max_epochs=4), 16, early_stop_cost=1e-6)

    assert done.outcome is not None
    assert (done.outcome.stop_reason, done.outcome.epochs) == ("early_stop", 1)
    assert not done.outcome.reached_target
    assert done.returned.state.epoch == pytest.approx(1.0)


def test_reports_the_named_evaluation_metric(tmp_path: Path) -> None:
    """A real accuracy from compute_metrics, found under the Trainer's eval_ prefix."""
    done = one_try(hf_train(tmp_path, metric="eval_accuracy"), job(max_epochs=2), 8)

    assert done.outcome is not None and done.outcome.last_metric is not None
    history = [
        log["eval_accuracy"] for log in done.returned.state.log_history if "eval_accuracy" in log
    ]
    assert len(history) == 2 and done.outcome.last_metric == history[-1]


def test_evaluating_every_few_steps_stops_at_the_target_mid_epoch(tmp_path: Path) -> None:
    done = one_try(
        hf_train(tmp_path, eval_strategy="steps", metric="error", metrics=lambda _: {"error": 0.1}),
        job(target=0.2, higher_is_better=False, max_epochs=3),
        8,
    )

    assert done.outcome is not None and done.outcome.stop_reason == "target"
    assert done.returned.state.global_step == 2  # the first evaluation, at step 2 of 8


def test_limits_are_restored_when_training_raises_inside_the_trainer(tmp_path: Path) -> None:
    with pytest.raises(FloatingPointError, match="loss is nan at step 7") as raised:
        one_try(hf_train(tmp_path, fail_at_step=7), job(), 8)

    attempt: Try = raised.value.zeus_try  # type: ignore[attr-defined]
    assert any(limit < ORIGINAL_W for limit in attempt.limits_set_w())  # it was profiling
    assert attempt.fake.limits_mw() == [ORIGINAL_W * 1000]


def test_a_metric_the_evaluation_lacks_breaks_the_contract_by_name(tmp_path: Path) -> None:
    with pytest.raises(TrainContractError, match=r"metric='f1' is not among .*eval_accuracy"):
        one_try(hf_train(tmp_path, metric="f1"), job(), 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eval_strategy": "no"}, "never evaluates"),
        ({"accumulation": 3}, "expected a multiple of gradient_accumulation_steps"),
    ],
)
def test_settings_zeus_cannot_work_with_fail_before_any_limit_changes(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        one_try(hf_train(tmp_path, **kwargs), job(), 16)

    assert raised.value.zeus_try.fake.set_calls == []  # type: ignore[attr-defined]


def test_the_trainers_own_max_steps_is_the_users_cap_not_a_verdict(tmp_path: Path) -> None:
    """max_steps=2 ends training in epoch 1 of 3: recorded invalid, no second size tried."""
    result, rows, fake = one_recurrence(
        hf_train(tmp_path, arguments={"max_steps": 2}), job(max_epochs=3)
    )
    assert result.return_value.state.global_step == 2  # the user's model, as asked
    assert [(r.status, r.observed) for r in rows] == [("invalid", False)]
    assert "the Trainer's max_steps=2" in (rows[0].error or "")
    assert not result.final.judged and fake.limits_mw() == [ORIGINAL_W * 1000]


def test_a_callback_without_its_run_is_named() -> None:
    args = transformers.TrainingArguments("out", eval_strategy="epoch", report_to=[], use_cpu=True)
    with pytest.raises(
        TypeError,
        match=r"ZeusTrainerCallback\(run=None\) is invalid: "
        "expected the TrainingRun",
    ):
        ZeusTrainerCallback(None, args, metric="accuracy")  # type: ignore[arg-type]


def test_a_second_trainer_train_is_named_not_a_stray_runtime_error(tmp_path: Path) -> None:
    """``trainer.train()`` twice on one run (a second phase): once a bare "begin_epoch()
    called after the run stopped"; now the contract, naming the call and its fix."""
    once = hf_train(tmp_path)

    def twice(run: TrainingRun) -> Any:
        trainer = once(run)
        trainer.train()
        return trainer

    with pytest.raises(TrainContractError, match=r"trainer.train\(\) was called a second time"):
        one_recurrence(twice, job(max_epochs=1))
