"""A Lightning ``Trainer`` under Zeus: :class:`ZeusLightningCallback`.

```python
from zeus_airflow.integrations.lightning import ZeusLightningCallback

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.batch_size = 32                   # set by the callback before any DataLoader
    def train_dataloader(self):
        return DataLoader(train_set, batch_size=self.batch_size, shuffle=True)
    def validation_step(self, batch, i):
        self.log("val_acc", accuracy(self(batch)))

def train(run):
    trainer = L.Trainer(callbacks=[ZeusLightningCallback(run, metric="val_acc")],
                        accumulate_grad_batches=2)
    trainer.fit(Model())
```

**Batch size.** ``run.batch_size`` is the *global* batch size (samples per optimizer step over
every device and accumulation step). At ``setup``, before Lightning asks for a DataLoader, the
callback sets the attribute ``batch_size_attr`` (default ``batch_size``) of the
LightningModule, its ``hparams`` or the DataModule (Lightning's own ``lightning_setattr``, as
its batch-size finder does) to ``run.batch_size / (accumulate_grad_batches x world_size)``; a
candidate that this does not divide is refused before training starts. The module's
``train_dataloader`` must read that attribute; at the start of training the callback checks
that the DataLoader really has that size.

**Epochs, steps, stopping.** The Trainer's epoch budget becomes the operator's ``max_epochs``
(leave the Trainer's unset: Lightning does not warn about it, the callback being a Timer).
Each training batch is one step for the power-limit profiler. The metric is the logged value
named ``metric`` (``self.log(...)`` in ``validation_step``), read from
``trainer.callback_metrics``; the sanity check's validation is ignored. Training stops through
``trainer.should_stop``: at the target as soon as a validation reaches it, and at an epoch's
end (after its validation) at the epoch budget or the early-stop bound. (Lightning still
honours its own ``min_epochs``/``min_steps``: leave them unset.) A ``max_steps`` or
``limit_train_batches=0`` of the Trainer's that ends training first is the user's own cap:
the try is recorded ``invalid`` (not judged against its batch size) and the task succeeds.
"""

from __future__ import annotations

from typing import Any

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.common.extras import raise_naming_extra
from zeus_airflow.core.train.run import CONTRACT, TrainContractError, TrainingRun, check_run

try:
    import lightning  # noqa: F401  (first: a missing install is then named 'lightning')
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Timer
    from lightning.pytorch.utilities.parsing import lightning_hasattr, lightning_setattr
except ModuleNotFoundError as _err:
    raise_naming_extra(_err, "zeus_airflow.integrations.lightning")

__all__ = ["ZeusLightningCallback"]


class ZeusLightningCallback(Timer):
    """Drives ``run`` from a Lightning ``Trainer``'s hooks (see the module's doc).

    A :class:`~lightning.pytorch.callbacks.Timer` without a duration (so it never stops
    training itself): Lightning leaves the epoch budget to a Trainer with a Timer instead of
    warning that ``max_epochs`` was not set and taking 1000, before any callback hook could
    set it; ``setup`` then sets the budget to the operator's ``max_epochs``.

    :param run: the run the operator handed to the train function.
    :param metric: the logged validation metric compared with ``target_metric``.
    :param batch_size_attr: the attribute the module's (or DataModule's) ``train_dataloader``
        reads its batch size from.
    """

    def __init__(self, run: TrainingRun, metric: str, batch_size_attr: str = "batch_size") -> None:
        check_run(run, "ZeusLightningCallback")
        super().__init__(duration=None)
        self.run = run
        self.metric = metric
        self.batch_size_attr = batch_size_attr
        self.per_device_batch_size: int | None = None

    # --- Lightning's hooks -------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if trainer.limit_val_batches == 0:
            raise ConfigError(
                "limit_val_batches=0 is invalid for ZeusLightningCallback: the Trainer never "
                f"validates, so the metric {self.metric!r} Zeus judges each epoch by is never "
                "logged; leave limit_val_batches at its default (or > 0) and log the metric "
                "in validation_step"
            )
        divisor = trainer.accumulate_grad_batches * trainer.world_size
        if self.run.batch_size % divisor:
            raise ConfigError(
                f"batch_sizes: batch size {self.run.batch_size} is invalid for this Trainer: "
                f"expected a multiple of accumulate_grad_batches "
                f"({trainer.accumulate_grad_batches}) x world_size ({trainer.world_size}) = "
                f"{divisor}, since the batch size Zeus chooses is the global one"
            )
        if not lightning_hasattr(pl_module, self.batch_size_attr):
            raise ConfigError(
                f"batch_size_attr={self.batch_size_attr!r} is invalid: neither the "
                "LightningModule, its hparams nor its DataModule has that attribute; expected "
                "the attribute train_dataloader() reads its batch size from"
            )
        self.per_device_batch_size = self.run.batch_size // divisor
        lightning_setattr(pl_module, self.batch_size_attr, self.per_device_batch_size)
        trainer.fit_loop.max_epochs = self.run.config.max_epochs

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = trainer.train_dataloader
        size = getattr(loader, "batch_size", None)
        if size is not None and size != self.per_device_batch_size:
            raise ConfigError(
                f"the training DataLoader has batch_size={size}, not the "
                f"{self.per_device_batch_size} per device Zeus set in "
                f"{self.batch_size_attr!r}: build it from that attribute in train_dataloader()"
            )
        super().on_train_start(trainer, pl_module)
        self.run.start_training()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.run.begin_epoch()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self.run.end_step()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation inside an epoch (``val_check_interval`` < 1) may reach the target."""
        super().on_validation_end(trainer, pl_module)
        if trainer.sanity_checking or not self.run.in_epoch:
            return
        self.run.report_metric(self._metric(trainer))
        if self.run.should_stop() is not None:
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Lightning validates before this hook: the epoch's metric is in, unless the
        Trainer's own cap (``max_steps``) cut the epoch short of its validation."""
        super().on_train_epoch_end(trainer, pl_module)
        cap = _own_cap(trainer)
        if cap is not None and self.metric not in trainer.callback_metrics:
            self.run.capped_by(cap)
        else:
            self.run.report_metric(self._metric(trainer))
        self.run.end_epoch()
        if self.run.should_stop() is not None:
            trainer.should_stop = True

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The Trainer's own cap ended training before Zeus said stop: the user's, not a
        verdict on the batch size (``TrainingRun.capped_by``)."""
        cap = _own_cap(trainer)
        if cap is not None and self.run.stop_reason is None:
            self.run.capped_by(cap)

    # --- internals ---------------------------------------------------------------------------
    def _metric(self, trainer: pl.Trainer) -> float:
        metrics = trainer.callback_metrics
        if self.metric not in metrics:
            raise TrainContractError(
                f"metric={self.metric!r} is not among the logged metrics {sorted(metrics)}: "
                f"log it with self.log({self.metric!r}, ...) in validation_step ({CONTRACT})"
            )
        value = metrics[self.metric]
        return float(value.item()) if hasattr(value, "item") else float(value)


def _own_cap(trainer: pl.Trainer) -> str | None:
    """The Trainer setting that ended training, if one did: ``max_steps`` reached, or
    ``limit_train_batches=0`` (no training at all)."""
    if trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
        return f"the Trainer's max_steps={trainer.max_steps}"
    if trainer.limit_train_batches == 0:
        return "the Trainer's limit_train_batches=0"
    return None
