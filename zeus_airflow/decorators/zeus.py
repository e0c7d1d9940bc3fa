"""``@task.zeus(...)``: a TaskFlow train function run as a :class:`ZeusTrainOperator`.

```python
from airflow.sdk import dag, task

@dag(schedule="@daily")
def retrain():
    @task.zeus(batch_sizes=[32, 64, 128], default_batch_size=64, target_metric=0.9,
               max_epochs=20, device="nvml:0")
    def train(run, region: str):
        ...                                  # the train function: run first, as always
        return {"accuracy": run.last_metric}

    train(region="eu")
```

The decorator takes the operator's parameters; the decorated function is its ``train``, and
the arguments the DAG calls it with are its ``train_kwargs`` (by keyword: the first
positional parameter is the run). Registered as ``zeus`` in the provider info's
``task-decorators``, so Airflow's ``task`` has it as ``task.zeus``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any, ClassVar

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.operators.train import ZeusTrainOperator


class _ZeusDecoratedOperator(DecoratedOperator, ZeusTrainOperator):
    """The operator behind ``@task.zeus``: Airflow's decorated operator for the call and its
    arguments, Zeus's for the training."""

    custom_operator_name = "@task.zeus"
    template_fields = (*DecoratedOperator.template_fields, *ZeusTrainOperator.template_fields)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **ZeusTrainOperator.template_fields_renderers,
    }

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if op_args:
            raise ConfigError(
                f"{python_callable.__name__}() was called with positional arguments "
                f"{list(op_args)!r}: expected keyword arguments only (they become the train "
                "function's train_kwargs; its first parameter is the run)"
            )
        super().__init__(
            python_callable=_without_run(python_callable),
            op_kwargs=op_kwargs,
            train=python_callable,
            train_kwargs=dict(op_kwargs or {}),
            **kwargs,
        )


def _without_run(train: Callable[..., Any]) -> Callable[..., Any]:
    """``train`` as Airflow's decorated operator checks the call against it: without its
    first parameter, the run, which the operator passes and the DAG does not."""
    signature = inspect.signature(train)
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigError(
            f"train={train.__name__!r} is invalid for @task.zeus: expected a function whose "
            "first parameter takes the run, e.g. def train(run, ...)"
        )

    def checked(*args: Any, **kwargs: Any) -> Any:  # never called: its signature is read
        raise NotImplementedError

    checked.__signature__ = signature.replace(parameters=parameters[1:])  # type: ignore[attr-defined]
    checked.__name__ = train.__name__
    return checked


def zeus_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """``@task.zeus(**operator parameters)``: see the module's doc."""
    return task_decorator_factory(
        python_callable=python_callable, decorated_operator_class=_ZeusDecoratedOperator, **kwargs
    )
