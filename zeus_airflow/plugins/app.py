"""The Zeus app Airflow's api-server mounts at ``/zeus``: pages, JSON API and its reference.

Every route needs a logged-in Airflow user (``auth.DagAccessDep``), the API reference and the
OpenAPI document included. Errors answer as their route does: a page gets an HTML page (or,
not logged in, the login page), the API gets JSON.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import version

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from zeus_airflow.core.store.base import StoreError
from zeus_airflow.plugins import api, apidocs, pages, render
from zeus_airflow.plugins.auth import (
    OPENAPI_PATH,
    DagAccessDep,
    is_page,
    login_redirect,
    login_url,
)
from zeus_airflow.plugins.queries import JobNotFoundError
from zeus_airflow.plugins.urls import Urls

TITLE = "Zeus energy"
DESCRIPTION = (
    "Per-run energy, time, batch size and GPU power limit of zeus-airflow training "
    "jobs, for the DAGs the logged-in Airflow user may read. Energy in J (and kWh), "
    "time in s, power in W, cost in J-equivalents."
)


def create_app() -> FastAPI:
    app = FastAPI(
        title=TITLE,
        description=DESCRIPTION,
        version=version("zeus-airflow"),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.include_router(api.router)
    app.include_router(pages.router)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(JobNotFoundError, _error(404, "Not found"))
    # The store cannot be opened, or went down after (``Store.reader`` says so in one
    # readable line): never a 500.
    app.add_exception_handler(StoreError, _error(503, "The zeus-airflow store is unavailable"))

    @app.get(OPENAPI_PATH, include_in_schema=False)
    def openapi(request: Request, _: DagAccessDep) -> JSONResponse:
        return JSONResponse(_spec(app, request))

    @app.get("/docs", include_in_schema=False, response_class=HTMLResponse)
    def docs(request: Request, _: DagAccessDep) -> HTMLResponse:
        spec = _spec(app, request)
        return render.page(
            request,
            "docs.html",
            title=TITLE,
            version=app.version,
            base=Urls.of(request).zeus(),
            endpoints=apidocs.endpoints(spec),
            models=apidocs.models(spec),
        )

    return app


def _spec(app: FastAPI, request: Request) -> dict[str, object]:
    return {**app.openapi(), "servers": [{"url": Urls.of(request).zeus()}]}


async def _http_error(request: Request, exc: Exception) -> Response:
    """Not logged in on a page: the login page. Other errors on a page: an HTML page."""
    assert isinstance(exc, HTTPException)
    if not is_page(request):
        return await http_exception_handler(request, exc)
    if exc.status_code == 401:
        return login_redirect(request)
    forbidden = exc.status_code == 403
    return render.page(
        request,
        "message.html",
        status_code=exc.status_code,
        heading=f"{exc.status_code}: {exc.detail}",
        message="Your login may not read this." if forbidden else "",
        login=login_url(request) if forbidden else None,
    )


def _error(status_code: int, heading: str) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handle(request: Request, exc: Exception) -> Response:
        if is_page(request):
            return render.page(
                request,
                "message.html",
                status_code=status_code,
                heading=heading,
                message=str(exc),
            )
        return JSONResponse({"detail": str(exc)}, status_code=status_code)

    return handle
