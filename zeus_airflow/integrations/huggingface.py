"""A Hugging Face ``Trainer`` under Zeus: :class:`ZeusTrainerCallback`.

```python
from zeus_airflow.integrations.huggingface import ZeusTrainerCallback

def train(run):
    args = TrainingArguments("out", eval_strategy="epoch", gradient_accumulation_steps=2,
                             report_to=[])
    zeus = ZeusTrainerCallback(run, args, metric="accuracy")   # before the Trainer is built
    trainer = Trainer(model=model, args=args, train_dataset=train_set, eval_dataset=val_set,
                      compute_metrics=accuracy, callbacks=[zeus])
    trainer.train()
```

**Batch size.** ``run.batch_size`` is the *global* batch size, the one the bandit learns:
samples per optimizer step over every device and accumulation step. The callback sets
``args.per_device_train_batch_size = run.batch_size / (gradient_accumulation_steps x
processes x GPUs per process)`` when it is built, which is why it must be built before the
``Trainer`` (the Trainer reads the size in its constructor); a candidate batch size that the
divisor does not divide is refused before training starts. At the start of training it checks
that the Trainer really trains at that size.

**Epochs, steps, stopping.** The Trainer's epoch budget becomes the operator's ``max_epochs``.
Each Trainer step (one optimizer step, so ``gradient_accumulation_steps`` micro-batches) is one
step for the power-limit profiler, which profiles the limits over the first steps of a batch
size's first run. The metric is the evaluation metric named ``metric`` (``accuracy`` finds
``eval_accuracy``); the Trainer must evaluate (``eval_strategy="epoch"`` is the natural choice;
``"steps"`` works too). Training stops through ``control.should_training_stop``: at the target
as soon as an evaluation reaches it, and at an epoch's end (after its evaluation, with
``eval_strategy="epoch"``) at the epoch budget or at the early-stop bound. A ``max_steps``
of the Trainer's that ends training first is the user's own cap: the try is recorded
``invalid`` (not judged against its batch size) and the task succeeds.
"""

from __future__ import annotations

from typing import Any

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.common.extras import raise_naming_extra
from zeus_airflow.core.train.run import CONTRACT, TrainContractError, TrainingRun, check_run

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ModuleNotFoundError as _err:
    raise_naming_extra(_err, "zeus_airflow.integrations.huggingface")

__all__ = ["ZeusTrainerCallback", "per_device_batch_size"]


def per_device_batch_size(global_batch_size: int, args: TrainingArguments) -> int:
    """Samples per device per micro-batch for ``global_batch_size`` samples per optimizer
    step: the size divided by gradient accumulation, processes and GPUs per process."""
    divisor = args.gradient_accumulation_steps * args.world_size * max(1, args.n_gpu)
    if global_batch_size % divisor:
        raise ConfigError(
            f"batch_sizes: batch size {global_batch_size} is invalid for this Trainer: "
            f"expected a multiple of gradient_accumulation_steps "
            f"({args.gradient_accumulation_steps}) x processes ({args.world_size}) x GPUs per "
            f"process ({max(1, args.n_gpu)}) = {divisor}, since the batch size Zeus chooses "
            "is the global one"
        )
    return global_batch_size // divisor


class ZeusTrainerCallback(TrainerCallback):
    """Drives ``run`` from a ``transformers.Trainer``'s events (see the module's doc).

    :param run: the run the operator handed to the train function.
    :param args: the ``TrainingArguments`` the Trainer will be built with (changed in place:
        per-device batch size and epoch budget).
    :param metric: the evaluation metric compared with ``target_metric``, with or without the
        Trainer's ``eval_`` prefix.
    """

    def __init__(self, run: TrainingRun, args: TrainingArguments, metric: str) -> None:
        check_run(run, "ZeusTrainerCallback")
        if args.eval_strategy == "no":
            raise ConfigError(
                "the Trainer never evaluates (eval_strategy='no'): Zeus needs the metric "
                f"{metric!r} to judge the run; set eval_strategy='epoch' (or 'steps') and an "
                "eval_dataset"
            )
        self.run = run
        self.metric = metric
        self.per_device_batch_size = per_device_batch_size(run.batch_size, args)
        args.per_device_train_batch_size = self.per_device_batch_size
        args.num_train_epochs = run.config.max_epochs
        self._evaluates_per_epoch = args.eval_strategy == "epoch"

    # --- the Trainer's events ----------------------------------------------------------------
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.run.epoch or self.run.stop_reason is not None:
            raise TrainContractError(
                f"trainer.train() was called a second time with this ZeusTrainerCallback "
                f"(after {self.run.epoch} epoch(s), stopped by {self.run.stop_reason}): a run "
                "is one training, so call trainer.train() once per train function (a second "
                f"phase, such as fine-tuning, belongs in the same epochs) ({CONTRACT})"
            )
        trained = (state.train_batch_size or 0) * args.gradient_accumulation_steps * args.world_size
        if trained != self.run.batch_size:
            raise ConfigError(
                f"the Trainer trains at a global batch size of {trained}, not the "
                f"{self.run.batch_size} Zeus chose: build ZeusTrainerCallback(run, args, ...) "
                "before the Trainer, with the same TrainingArguments, and leave "
                "auto_find_batch_size off"
            )
        self.run.start_training()

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run.begin_epoch()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run.end_step()

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run.end_epoch()
        if not self._evaluates_per_epoch:  # else the evaluation that follows decides
            self._stop_if_told(control)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """The Trainer's own ``max_steps`` ended training before Zeus said stop: the user's
        cap, not a verdict on the batch size (``TrainingRun.capped_by``)."""
        if (
            self.run.stop_reason is None
            and args.max_steps > 0
            and state.global_step >= args.max_steps
        ):
            self.run.capped_by(f"the Trainer's max_steps={args.max_steps}")

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        self.run.report_metric(self._metric_of(metrics or {}))
        self._stop_if_told(control)

    # --- internals ---------------------------------------------------------------------------
    def _stop_if_told(self, control: TrainerControl) -> None:
        if self.run.should_stop() is not None:
            control.should_training_stop = True

    def _metric_of(self, metrics: dict[str, float]) -> float:
        for key in (self.metric, f"eval_{self.metric}"):
            if key in metrics:
                value = metrics[key]
                # A numpy or torch scalar from compute_metrics: report_metric checks the rest.
                return value.item() if hasattr(value, "item") else value
        raise TrainContractError(
            f"metric={self.metric!r} is not among the evaluation's metrics "
            f"{sorted(metrics)}: name one of them (compute_metrics adds more) ({CONTRACT})"
        )
