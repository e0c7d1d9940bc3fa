"""
# lightning_retrain: a Lightning Trainer retrained daily through Zeus

A classifier written as a `LightningModule`, retrained every day on that day's sample of
points from 6 noisy spirals arms in 2D (lifted to 16 features). The module's
`train_dataloader` reads `self.batch_size`, which `ZeusLightningCallback` sets to the
per-device share of the global batch size Zeus chose, before Lightning builds the DataLoader;
the callback also profiles the power limits over the first batches and stops the Trainer
(`trainer.should_stop`) at the target or the early-stop bound (docs/frameworks.md).

The machine has no GPU, so the run uses a **simulated** GPU (`device="simulated:v100"`): the
steps are real, power and slowdown follow the V100's measured curve; every figure is labelled
simulated. Needs `pip install 'zeus-airflow[lightning,examples]'`.

## Run it

```bash
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags
airflow db migrate
airflow dags test lightning_retrain 2025-01-01
zeus-airflow runs --job lightning_retrain.train
```
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG

from zeus_airflow import TrainingRun, ZeusTrainOperator

ARMS, FEATURES = 6, 16
TRAIN_SAMPLES, VALIDATION_SAMPLES = 3072, 1024


def spirals(seed: int, samples: int) -> Any:
    """Points along ``ARMS`` spiral arms with noise, projected to ``FEATURES`` dimensions by a
    fixed random matrix; the label is the arm."""
    import torch

    draw = torch.Generator().manual_seed(seed)
    arm = torch.randint(0, ARMS, (samples,), generator=draw)
    radius = torch.rand(samples, generator=draw) * 2 + 0.3
    angle = arm * (2 * torch.pi / ARMS) + radius * 1.5
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], 1)
    points += torch.randn(samples, 2, generator=draw) * 0.08
    lift = torch.randn(2, FEATURES, generator=torch.Generator().manual_seed(0))
    return torch.tanh(points @ lift), arm


def train(run: TrainingRun, day: str) -> dict[str, float]:
    """Fit the module on ``day``'s sample (``YYYY-MM-DD``) at Zeus's batch size."""
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from zeus_airflow.integrations.lightning import ZeusLightningCallback

    torch.set_num_threads(1)
    seed = int(day.replace("-", ""))

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(FEATURES, 64),
                torch.nn.ReLU(),
                torch.nn.Linear(64, 64),
                torch.nn.ReLU(),
                torch.nn.Linear(64, ARMS),
            )
            self.batch_size = 64  # replaced by the callback before the DataLoader is built

        def train_dataloader(self) -> DataLoader:
            return DataLoader(
                TensorDataset(*spirals(seed, TRAIN_SAMPLES)),
                batch_size=self.batch_size,
                shuffle=True,
            )

        def val_dataloader(self) -> DataLoader:
            return DataLoader(
                TensorDataset(*spirals(seed + 1, VALIDATION_SAMPLES)), batch_size=VALIDATION_SAMPLES
            )

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            features, labels = batch
            return torch.nn.functional.cross_entropy(self.net(features), labels)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            features, labels = batch
            self.log("val_acc", (self.net(features).argmax(1) == labels).float().mean())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=3e-3)

    torch.manual_seed(seed)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ZeusLightningCallback(run, metric="val_acc")],
    )
    trainer.fit(Classifier())
    return {"val_acc": run.last_metric or 0.0}


with DAG(
    dag_id="lightning_retrain",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["zeus", "example", "simulated", "lightning"],
    doc_md=__doc__,
):
    ZeusTrainOperator(
        task_id="train",
        train=train,
        train_kwargs={"day": "{{ ds }}"},
        batch_sizes=[16, 32, 64, 128, 256],
        default_batch_size=128,
        target_metric=0.95,
        max_epochs=10,
        device="simulated:v100",
        warmup_steps=3,
        profile_steps=8,
    )
