"""The Electricity Maps API behind an Airflow Connection (default ``electricitymaps_default``).

The Connection's password is the API token (sent as the ``auth-token`` header). Its extra
``base_url`` (or its host) replaces the API's base URL (``https://api.electricitymaps.com/v3``),
e.g. for a proxy; its extras may also set ``timeout_s``, ``retries``, ``backoff_s``,
``cache_ttl_s`` and ``budget_s`` (``electricitymaps.SETTINGS``; a value it does not accept
makes the source fail, and the run's figures fall back, saying which extra and what it
accepts).
Answers are cached for the whole worker process, so that planning a start and accounting
for the run that follows ask the API once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from zeus_airflow.core.carbon.electricitymaps import (
    DEFAULT_BASE_URL,
    ElectricityMapsClient,
    ResponseCache,
    check_settings,
)
from zeus_airflow.core.carbon.signal import SourceError

if TYPE_CHECKING:
    from zeus_airflow.core.carbon.options import CarbonOptions
    from zeus_airflow.core.carbon.service import CarbonService

DEFAULT_CONN_ID = "electricitymaps_default"
CONN_TYPE = "electricitymaps"
_CACHE = ResponseCache()
"""One per worker process."""


class ElectricityMapsHook(BaseHook):
    """Builds an :class:`ElectricityMapsClient` from a Connection."""

    conn_name_attr = "carbon_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Electricity Maps"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "login", "port"],
            "relabeling": {"password": "API token", "host": "Base URL"},
            "placeholders": {"host": DEFAULT_BASE_URL, "extra": '{"timeout_s": 10, "retries": 3}'},
        }

    def __init__(self, carbon_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.carbon_conn_id = carbon_conn_id

    def get_conn(self) -> ElectricityMapsClient:
        try:
            conn = BaseHook.get_connection(self.carbon_conn_id)
        except AirflowNotFoundException:
            raise SourceError(
                f"carbon_conn_id={self.carbon_conn_id!r}: no such Airflow "
                "connection; create it with the Electricity Maps token as its "
                "password"
            ) from None
        if not conn.password:
            raise SourceError(
                f"connection {self.carbon_conn_id!r} has no password: put the "
                "Electricity Maps API token there"
            )
        extra = conn.extra_dejson or {}
        settings = check_settings(extra, f"connection {self.carbon_conn_id!r}'s extras")
        base = extra.get("base_url") or conn.host or DEFAULT_BASE_URL
        if "://" not in base:
            base = f"https://{base}"
        return ElectricityMapsClient(
            conn.password, base_url=base, cache=_CACHE, **cast(dict[str, Any], settings)
        )


def carbon_service(
    options: CarbonOptions, carbon_conn_id: str, log: logging.Logger
) -> CarbonService:
    """The carbon service for a task's options, the Electricity Maps token read from
    ``carbon_conn_id`` when the source is the API (and only then)."""
    from zeus_airflow.core.carbon.service import CarbonService

    return CarbonService(options, lambda: ElectricityMapsHook(carbon_conn_id).get_conn(), log)
