"""
# model_deploy_on_asset: on each new model, what it cost in energy and gCO2e

Scheduled on the Asset `model://zeus-examples/cifar100-resnet` that `model_retrain_asset`'s
Zeus task updates: each run reads the figures the retraining put in the asset event's
`extra["zeus"]` (through `triggering_asset_events`), prints what the model cost (energy,
time, batch size and power limit, gCO2e with the intensity's provenance, the saving against
Default, labelled `replayed` here) and returns them, where a deploy step would gate on them
(docs/integrations.md).

## Run it

With `model_retrain_asset` (its doc): every retraining starts a run of this DAG.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, dag, task

from zeus_airflow.integrations.published import cost_line
from zeus_airflow.integrations.publishing import figures_of

MODEL = Asset("model://zeus-examples/cifar100-resnet")


@dag(
    schedule=[MODEL],
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    tags=["zeus", "assets"],
    doc_md=__doc__,
)
def model_deploy_on_asset() -> None:
    @task
    def report_cost(triggering_asset_events: Any = None) -> dict[str, Any]:
        """The new model's cost, as its retraining measured it."""
        runs = figures_of(triggering_asset_events or {MODEL: []}, MODEL)
        for figures in runs:
            print(f"new model from job {figures['job_id']}: {cost_line(figures)}")
        if not runs:  # a manual run, or another producer's event
            print("no Zeus figures among the events that triggered this run")
            return {}
        return runs[-1]

    report_cost()


model_deploy_on_asset()
