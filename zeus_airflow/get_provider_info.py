"""What Airflow's providers manager learns about zeus-airflow (``apache_airflow_provider``
entry point): the store's and Electricity Maps' connection types, the task instance's "Zeus
job" link and the ``@task.zeus`` decorator.

The UI plugin is registered through the ``airflow.plugins`` entry point only: a ``plugins``
key here is honoured only with ``[core] lazy_discover_providers = False`` and would register
the plugin a second time there ("already registered" in every component). Airflow takes the
version from the package.
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "zeus-airflow",
        "name": "Zeus energy-aware training",
        "description": "Learns the batch size and GPU power limit of recurring training tasks "
        "across DAG runs (Zeus, NSDI'23), and shows per-run energy in the UI.",
        "connection-types": [
            {
                "connection-type": "zeus_store",
                "hook-class-name": "zeus_airflow.hooks.store.ZeusStoreHook",
            },
            {
                "connection-type": "electricitymaps",
                "hook-class-name": "zeus_airflow.hooks.carbon.ElectricityMapsHook",
            },
        ],
        "extra-links": ["zeus_airflow.operators.links.ZeusJobLink"],
        "task-decorators": [
            {"name": "zeus", "class-name": "zeus_airflow.decorators.zeus.zeus_task"}
        ],
    }
