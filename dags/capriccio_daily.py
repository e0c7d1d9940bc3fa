"""
# capriccio_daily: retrain a sentiment classifier every day on a drifting tweet stream

The paper's §6.4 as a DAG. Each day's run retrains on that day's **Capriccio slice**: the
tweets of a Sentiment140-format corpus from the run's logical date on, a fixed number of
consecutive tweets, split once (seeded) into training and validation tweets.

1. `prepare_slice` cuts the slice starting on the logical date and writes it to
   `$AIRFLOW_HOME/capriccio/slices/<day>/` (`train.csv`, `val.csv`, `slice.json`); it emits
   an event on the `capriccio_slices` asset, so other DAGs can be scheduled on new slices. A
   day without tweets, or too close to the corpus end for a full slice, has no slice: the
   run is skipped.
2. `train` (`ZeusTrainOperator`) trains a small PyTorch classifier on the slice, on this
   worker's CPU, at the batch size and power limit Zeus picks. Posteriors keep each batch
   size's **10 latest runs** (`window_size=10`, about two weeks), so when the data drifts the
   job notices and explores again. The GPU is **simulated** (a V100 following the power curve
   the paper measured for Sentiment140): every energy figure is labelled simulated.

## Run it

The corpus is the `corpus_csv` param, else `$ZEUS_CAPRICCIO_CSV`, else a synthetic drifting
corpus generated once into `$AIRFLOW_HOME/capriccio/synthetic.csv` (its days run from
2009-04-06, like Sentiment140's, with an abrupt shift on 2009-05-02). Its slices start on
past dates, so run them as a backfill:

```bash
airflow dags test capriccio_daily 2009-04-20                     # one day
airflow backfill create --dag-id capriccio_daily \\
    --from-date 2009-04-06 --to-date 2009-05-25                  # every day, in order
```
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, Param, task

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.capriccio.job import SIMULATED_DEVICE, CapriccioJob
from zeus_airflow.capriccio.slicing import DEFAULT_SPLIT_SEED, DEMO_SLICE_SIZE, DEMO_VAL_SIZE

SLICES = Asset("capriccio_slices")
"""One event per prepared slice; ``extra`` says its day, index and folder."""


def train(run: Any, slice_dir: str) -> dict[str, float]:
    """Train on the prepared slice. PyTorch is imported when the task runs, not at parse."""
    from zeus_airflow.capriccio.training import train_slice

    return train_slice(run, slice_dir)


with DAG(
    dag_id="capriccio_daily",
    schedule="@daily",
    start_date=pendulum.datetime(2009, 4, 6, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # each day's choice learns from the days before
    tags=["zeus", "capriccio", "simulated"],
    doc_md=__doc__,
    params={
        "corpus_csv": Param(
            "",
            type="string",
            description="Sentiment140-format CSV; empty: $ZEUS_CAPRICCIO_CSV "
            "or the synthetic corpus",
        ),
        "slice_size": Param(DEMO_SLICE_SIZE, type="integer", minimum=2),
        "val_size": Param(DEMO_VAL_SIZE, type="integer", minimum=1),
        "split_seed": Param(DEFAULT_SPLIT_SEED, type="integer"),
    },
):

    @task(outlets=[SLICES])
    def prepare_slice(**context: Any) -> str:
        """Write the slice of the logical date's day; skip the run when there is none."""
        import os

        from airflow.sdk.exceptions import AirflowSkipException

        from zeus_airflow.capriccio.generator import ensure_corpus
        from zeus_airflow.capriccio.slicing import SliceSizes, prepare_day
        from zeus_airflow.core.store.location import airflow_home

        params, root = context["params"], airflow_home() / "capriccio"
        corpus = (
            params["corpus_csv"]
            or os.environ.get("ZEUS_CAPRICCIO_CSV")
            or ensure_corpus(root / "synthetic.csv")
        )
        day = context["logical_date"].date()
        out = prepare_day(
            corpus,
            day,
            root / "slices",
            SliceSizes(params["slice_size"], params["val_size"]),
            params["split_seed"],
        )
        if out is None:
            raise AirflowSkipException(
                f"no Capriccio slice starts on {day} in {corpus}: a "
                "day without tweets, or too late for a full slice"
            )
        context["outlet_events"][SLICES].extra = {"day": day.isoformat(), "path": str(out)}
        return str(out)

    retrain = ZeusTrainOperator(
        task_id="train",
        train=train,
        train_kwargs={"slice_dir": "{{ ti.xcom_pull(task_ids='prepare_slice') }}"},
        device=SIMULATED_DEVICE,
        inlets=[SLICES],
        **CapriccioJob().operator_kwargs(),  # batch sizes, b0, target, window_size=10, beta
    )
    prepare_slice() >> retrain
