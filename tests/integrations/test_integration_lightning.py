"""ZeusLightningCallback with the real Lightning Trainer on the CPU: a small MLP on
synthetic Gaussian clusters, a fake NVML GPU."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from fixtures_frameworks import CANDIDATES, ORIGINAL_W, Try, job, one_recurrence, one_try

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.train.run import TrainContractError, TrainingRun
from zeus_airflow.integrations.lightning import ZeusLightningCallback

SAMPLES, FEATURES = 64, 8


@pytest.fixture(autouse=True)
def _cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    torch.set_num_threads(1)


def clusters(samples: int, seed: int) -> torch.utils.data.TensorDataset:
    draw = torch.Generator().manual_seed(seed)
    labels = torch.arange(samples) % 2
    return torch.utils.data.TensorDataset(
        torch.randn(samples, FEATURES, generator=draw) + labels[:, None] * 2.0, labels
    )


class Classifier(pl.LightningModule):
    """``metrics(epoch)`` scripts the logged metric (default: real validation accuracy)."""

    def __init__(
        self,
        run: TrainingRun,
        metrics: Callable[[int], float] | None = None,
        fail_at_step: int | None = None,
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )
        self.batch_size = 1  # the callback sets it
        self.run, self.metrics, self.fail_at_step = run, metrics, fail_at_step
        self.seen: list[int] = []

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(clusters(SAMPLES, 1), batch_size=self.batch_size)

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(clusters(SAMPLES // 2, 2), batch_size=SAMPLES)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at_step is not None and self.global_step >= self.fail_at_step:
            raise FloatingPointError(f"loss is nan at step {self.global_step}")
        features, labels = batch
        self.seen.append(len(labels))
        return torch.nn.functional.cross_entropy(self.net(features), labels)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        features, labels = batch
        accuracy = (self.net(features).argmax(1) == labels).float().mean()
        value = self.metrics(self.run.epoch) if self.metrics is not None else accuracy
        self.log("val_acc", value)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def lightning_train(
    tmp_path: Path,
    *,
    metric: str = "val_acc",
    accumulation: int = 1,
    trainer_args: dict[str, Any] | None = None,
    **model_args: Any,
) -> Callable[[TrainingRun], Any]:
    def train(run: TrainingRun) -> Classifier:
        model = Classifier(run, **model_args)
        # No max_epochs: the operator's is the budget (the docs' Trainer sets none either).
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            accumulate_grad_batches=accumulation,
            callbacks=[ZeusLightningCallback(run, metric=metric)],
            default_root_dir=tmp_path,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            **(trainer_args or {}),
        )
        trainer.fit(model)
        model.trainer_epochs = trainer.current_epoch  # type: ignore[attr-defined]
        return model

    return train


def test_the_global_batch_size_reaches_the_dataloader_per_device(tmp_path: Path) -> None:
    """b=16 with 2 accumulated batches: batches of 8 from the module's own DataLoader."""
    done = one_try(lightning_train(tmp_path, accumulation=2), job(max_epochs=1), 16)

    model = done.returned
    assert model.batch_size == 8
    assert model.seen == [8] * (SAMPLES // 8)
    assert done.outcome is not None and done.outcome.batch_size == 16


def test_profiles_the_power_limits_over_the_first_steps(tmp_path: Path) -> None:
    done = one_try(lightning_train(tmp_path), job(max_epochs=3), 8)

    assert done.outcome is not None
    profile = done.run.profiler.profile
    assert done.limits_set_w()[0] == 300  # the maximum first, then the search
    assert profile.complete and 1 < len(profile.measurements) <= CANDIDATES
    assert set(done.limits_set_w()) >= set(profile.measurements)
    assert done.run.profiler.optimal_power_limit_w == done.outcome.power_limit_w
    assert done.fake.limits_mw() == [ORIGINAL_W * 1000]
    assert (done.outcome.epochs, done.outcome.stop_reason) == (3, "max_epochs")
    assert done.returned.trainer_epochs == 3  # Lightning's budget became the job's


def test_stops_at_the_target_through_should_stop(tmp_path: Path) -> None:
    scripted = {0: 0.99, 1: 0.4, 2: 0.7, 3: 0.95, 4: 0.99}  # 0: the sanity check, ignored
    done = one_try(
        lightning_train(tmp_path, metrics=lambda epoch: scripted[epoch]),
        job(target=0.9, max_epochs=4),
        16,
    )

    assert done.outcome is not None
    assert (done.outcome.stop_reason, done.outcome.epochs) == ("target", 3)
    assert done.outcome.reached_target and done.outcome.last_metric == pytest.approx(0.95)
    assert done.returned.trainer_epochs == 3


def test_stops_at_the_early_stop_bound(tmp_path: Path) -> None:
    done = one_try(lightning_train(tmp_path), job(max_epochs=4), 16, early_stop_cost=1e-6)

    assert done.outcome is not None
    assert (done.outcome.stop_reason, done.outcome.epochs) == ("early_stop", 1)
    assert done.returned.trainer_epochs == 1


def test_reports_the_logged_validation_metric(tmp_path: Path) -> None:
    done = one_try(lightning_train(tmp_path), job(max_epochs=2), 8)

    assert done.outcome is not None and done.outcome.last_metric is not None
    assert 0.5 < done.outcome.last_metric <= 1.0  # two well-separated clusters: learnt


def test_limits_are_restored_when_training_raises_inside_lightning(tmp_path: Path) -> None:
    with pytest.raises(FloatingPointError, match="loss is nan at step 7") as raised:
        one_try(lightning_train(tmp_path, fail_at_step=7), job(), 8)

    attempt: Try = raised.value.zeus_try  # type: ignore[attr-defined]
    assert any(limit < ORIGINAL_W for limit in attempt.limits_set_w())
    assert attempt.fake.limits_mw() == [ORIGINAL_W * 1000]


def test_a_metric_never_logged_breaks_the_contract_by_name(tmp_path: Path) -> None:
    with pytest.raises(TrainContractError, match=r"metric='val_f1' is not among .*val_acc"):
        one_try(lightning_train(tmp_path, metric="val_f1"), job(), 8)


def test_a_batch_size_the_accumulation_does_not_divide_fails_before_any_limit_change(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="multiple of accumulate_grad_batches"):
        one_try(lightning_train(tmp_path, accumulation=3), job(), 16)


@pytest.mark.parametrize(
    ("trainer_args", "cap"),
    [
        ({"max_steps": 2}, "the Trainer's max_steps=2"),
        ({"limit_train_batches": 0}, "the Trainer's limit_train_batches=0"),
    ],
)
def test_the_trainers_own_cap_is_the_users_not_a_verdict(
    tmp_path: Path, trainer_args: dict[str, Any], cap: str
) -> None:
    result, rows, fake = one_recurrence(
        lightning_train(tmp_path, trainer_args=trainer_args), job(max_epochs=3)
    )
    assert [(r.status, r.observed) for r in rows] == [("invalid", False)]  # no second size
    assert cap in (rows[0].error or "") and not result.final.judged
    assert fake.limits_mw() == [ORIGINAL_W * 1000]


def test_a_callback_without_its_run_is_named() -> None:
    with pytest.raises(TypeError, match=r"ZeusLightningCallback\(run=None\) is invalid"):
        ZeusLightningCallback(None, metric="val_acc")  # type: ignore[arg-type]


def test_lightning_does_not_warn_that_max_epochs_was_not_set(tmp_path: Path) -> None:
    """The Trainer sets no max_epochs, as the docs show: the operator's budget holds, and
    Lightning has nothing to warn about."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = one_try(lightning_train(tmp_path), job(max_epochs=2), 8)
    assert (done.outcome.epochs, done.outcome.stop_reason) == (2, "max_epochs")
    assert not [w for w in caught if "max_epochs" in str(w.message)]


@pytest.mark.parametrize("limit", [0, 0.0])
def test_a_trainer_that_never_validates_is_refused_before_any_limit_change(
    tmp_path: Path, limit: float
) -> None:
    """``limit_val_batches=0``: no metric would ever be logged (once "metric 'val_acc' is
    not among the logged metrics []" after training an epoch)."""
    with pytest.raises(ConfigError, match=r"limit_val_batches=0 is invalid") as raised:
        one_try(lightning_train(tmp_path, trainer_args={"limit_val_batches": limit}), job(), 8)
    attempt = raised.value.zeus_try  # type: ignore[attr-defined]
    assert attempt.fake.set_calls == [] and attempt.run.steps_trained == 0
