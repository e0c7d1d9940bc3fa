"""Login for the Zeus app through Airflow's own auth manager.

Airflow mounts plugin apps without any authentication (notes §5), so every route of the Zeus
app depends on :data:`DagAccessDep`: Airflow's ``get_user`` dependency (a ``Bearer`` token, or
the ``_token`` cookie the Airflow UI sets, which the iframe sends along), then the auth
manager's answer to which DAGs that user may read. Without a valid login, JSON gets 401 and a
page is redirected to the auth manager's login page, which comes back to it afterwards.
"""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException

from zeus_airflow.plugins.access import DagAccess

API_PREFIX = "/api/"
"""Routes under it (and the OpenAPI document) answer JSON; the others are pages."""
OPENAPI_PATH = "/openapi.json"


def dag_access(user: GetUserDep) -> DagAccess:
    """The DAGs the logged-in user may read, as the auth manager says."""
    manager = get_auth_manager()
    if manager.is_authorized_dag(method="GET", user=user):
        return DagAccess(all_dags=True, dag_ids=frozenset())
    return DagAccess(all_dags=False,
                     dag_ids=frozenset(manager.get_authorized_dag_ids(user=user, method="GET")))


DagAccessDep = Annotated[DagAccess, Depends(dag_access)]


def is_page(request: Request) -> bool:
    path = request.url.path.removeprefix(str(request.scope.get("root_path", "")))
    return not (path.startswith(API_PREFIX) or path == OPENAPI_PATH)


async def login_redirect(request: Request, exc: Exception) -> Response:
    """Not logged in (401) on a page: off to the login page, then back here."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 401 and is_page(request):
        login = get_auth_manager().get_url_login(next_url=str(request.url))
        return RedirectResponse(login, status_code=307)
    return await http_exception_handler(request, exc)
