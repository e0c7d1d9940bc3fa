"""The Airflow plugin, registered through the ``airflow.plugins`` entry point (only there:
listing it in the provider info as well registers it twice).

Airflow imports plugins in every component, task processes included, but only the
api-server serves the app: :class:`LazyApp` builds it on the first request, so a task never
imports FastAPI routes, templates or Airflow's API security for nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin

from zeus_airflow import airflow_compat  # noqa: F401  (an unsupported Airflow: a clear error)
from zeus_airflow.core.common.naming import UI_PREFIX

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

NAV_ICON = (
    "data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' "
    "fill='none' stroke='%23{color}' stroke-width='2' stroke-linejoin='round'>"
    "<path d='M13 2 4 14h7l-1 8 9-12h-7z'/></svg>"
)
"""A lightning bolt, inline: the nav icon needs no route (and no login) of its own."""


class LazyApp:
    """An ASGI app that builds the Zeus FastAPI app when it is first called."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            from zeus_airflow.plugins.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


_ROUTE = UI_PREFIX.strip("/")
APPS = [{"app": LazyApp(), "url_prefix": UI_PREFIX, "name": "Zeus energy"}]
VIEWS = [
    # Relative hrefs: Airflow shows them in an iframe at /plugin/<url_route>, filling in the
    # {DAG_ID}-style fields on DAG and task pages.
    {
        "name": "Zeus energy",
        "href": f"{_ROUTE}/jobs",
        "destination": "nav",
        "url_route": "zeus",
        "nav_top_level": True,
        "icon": NAV_ICON.format(color="52525b"),
        "icon_dark_mode": NAV_ICON.format(color="d4d4d8"),
    },
    {
        "name": "Zeus energy",
        "href": f"{_ROUTE}/dags/{{DAG_ID}}",
        "destination": "dag",
        "url_route": "zeus_dag",
    },
    {
        "name": "Zeus energy",
        "href": f"{_ROUTE}/dags/{{DAG_ID}}/tasks/{{TASK_ID}}",
        "destination": "task",
        "url_route": "zeus_task",
    },
    # Airflow fills {MAP_INDEX} on a mapped instance's page only; elsewhere it stays as is.
    {
        "name": "Zeus energy",
        "href": f"{_ROUTE}/dags/{{DAG_ID}}/tasks/{{TASK_ID}}?run_id={{RUN_ID}}"
        "&map_index={MAP_INDEX}",
        "destination": "task_instance",
        "url_route": "zeus_task_instance",
    },
]


class ZeusPlugin(AirflowPlugin):
    name = "zeus_airflow"
    fastapi_apps = APPS
    external_views = VIEWS
