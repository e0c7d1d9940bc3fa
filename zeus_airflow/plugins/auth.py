"""Login for the Zeus app through Airflow's own auth manager.

Airflow mounts plugin apps (``fastapi_apps``) without any authentication, so every route of the Zeus
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
from fastapi.responses import RedirectResponse

from zeus_airflow.airflow_compat import auth_manager_login_url
from zeus_airflow.airflow_db import dag_count
from zeus_airflow.plugins.access import DagAccess

API_PREFIX = "/api/"
"""Routes under it (and the OpenAPI document) answer JSON; the others are pages."""
OPENAPI_PATH = "/openapi.json"


def dag_access(user: GetUserDep) -> DagAccess:
    """The DAGs the logged-in user may read, as the auth manager says.

    "Every DAG" needs both answers: the auth manager's for DAGs in general (no DAG named),
    and its list of readable DAGs holding every DAG there is. An auth manager that answers
    the first loosely can then never widen what a user with a DAG list sees.
    """
    manager = get_auth_manager()
    readable = frozenset(manager.get_authorized_dag_ids(user=user, method="GET"))
    every = manager.is_authorized_dag(method="GET", user=user) and len(readable) >= dag_count()
    return DagAccess(all_dags=every, dag_ids=readable)


DagAccessDep = Annotated[DagAccess, Depends(dag_access)]


def is_page(request: Request) -> bool:
    path = request.url.path.removeprefix(str(request.scope.get("root_path", "")))
    return not (path.startswith(API_PREFIX) or path == OPENAPI_PATH)


def login_url(request: Request) -> str:
    """The auth manager's login page, coming back to this request's page afterwards: its
    path and query only, so a forged Host header never reaches the login page's ``next=``
    (and a path of leading slashes never becomes another host's URL)."""
    path = "/" + request.url.path.lstrip("/")
    back = f"{path}?{request.url.query}" if request.url.query else path
    return auth_manager_login_url(get_auth_manager(), back)


def login_redirect(request: Request) -> RedirectResponse:
    return RedirectResponse(login_url(request), status_code=307)
