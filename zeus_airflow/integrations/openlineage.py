"""A Zeus task's figures in its OpenLineage events: the run facet ``zeus``.

Airflow's OpenLineage provider (``pip install 'zeus-airflow[openlineage]'``, then a transport
in ``[openlineage]``) asks each task for its facets once it has finished, through the
operator's ``get_openlineage_facets_on_complete`` and ``get_openlineage_facets_on_failure``
(``integrations/publishing.py``: ``ZeusTrainOperator`` and ``@task.zeus`` both have them).
The answer is one run facet, ``zeus``: the run's published record (``published.PUBLISHED``;
a value None is left out, as OpenLineage leaves out nulls) and, on a FAIL event, ``failed``.
Its ``_schemaURL`` names the schema the package ships (:data:`SCHEMA_FILE`), which
:func:`facet_schema` builds from the same declaration (a test keeps the file in step).

Imported only where the provider is installed: nothing here runs without it.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from zeus_airflow.integrations.published import PUBLISHED, properties

FACET_NAME = "zeus"
"""The facet's key in the event's ``run.facets``."""
SCHEMA_VERSION = "1-0-0"
SCHEMA_FILE = "ZeusRunFacet.json"
"""In ``zeus_airflow/integrations/schemas/`` (package data)."""
SCHEMA_URL = (
    f"https://zeus-airflow.dev/spec/facets/{SCHEMA_VERSION}/{SCHEMA_FILE}#/$defs/ZeusRunFacet"
)
"""The facet's ``_schemaURL``: names this version of :data:`SCHEMA_FILE` (its ``$id``)."""
_RUN_FACET_REF = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunFacet"


def facet_schema() -> dict[str, Any]:
    """The facet's JSON schema, in OpenLineage's layout for a custom facet: the facet under
    ``$defs`` (a RunFacet with the published values), and the ``zeus`` key of ``run.facets``
    that holds it."""
    own = {**properties(), "failed": {"type": "boolean", "description": _FAILED}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_URL.split("#")[0],
        "$defs": {
            "ZeusRunFacet": {
                "allOf": [
                    {"$ref": _RUN_FACET_REF},
                    {
                        "type": "object",
                        "properties": own,
                        "required": ["job_id"],
                    },
                ],
                "type": "object",
            }
        },
        "type": "object",
        "properties": {FACET_NAME: {"$ref": "#/$defs/ZeusRunFacet"}},
    }


_FAILED = (
    "FAIL events only: true. The figures are then those the run published before it failed "
    "(a missed target with fail_on_missed_target), else the ones the store holds for it (its "
    "tries' energy measured up to the error)."
)


def shipped_schema() -> dict[str, Any]:
    """:data:`SCHEMA_FILE` as the package ships it."""
    loaded: dict[str, Any] = json.loads(_schema_file().read_text())
    return loaded


def write_schema() -> None:
    """Write :data:`SCHEMA_FILE` from the declaration, in a checkout (a figure was added:
    ``python -c "from zeus_airflow.integrations.openlineage import write_schema;
    write_schema()"``; a changed meaning of a published value also calls for a new
    :data:`SCHEMA_VERSION`)."""
    Path(str(_schema_file())).write_text(json.dumps(facet_schema(), indent=2) + "\n")


def _schema_file() -> Any:
    return resources.files("zeus_airflow.integrations").joinpath("schemas", SCHEMA_FILE)


def run_facets(values: dict[str, Any] | None, *, failed: bool = False) -> Any:
    """The provider's ``OperatorLineage`` with the ``zeus`` run facet of ``values`` (a
    published record); None without one (a task that published nothing: the provider then
    sends its event without the facet)."""
    if values is None:
        return None
    from airflow.providers.openlineage.extractors import OperatorLineage

    known = {name: value for name, value in values.items() if value is not None}
    if failed:
        known["failed"] = True
    facet = _facet_class()().with_additional_properties(**known)
    return OperatorLineage(run_facets={FACET_NAME: facet})


@functools.cache
def _facet_class() -> type:
    """The facet's class: a RunFacet whose ``_schemaURL`` is :data:`SCHEMA_URL`; its fields
    are added per event (``with_additional_properties``, the client's way to carry custom
    fields), from the published record."""
    import attrs
    from openlineage.client.facet_v2 import RunFacet

    @attrs.define
    class ZeusRunFacet(RunFacet):
        @staticmethod
        def _get_schema() -> str:
            return SCHEMA_URL

    return ZeusRunFacet


def lineage_on() -> bool:
    """Whether the provider is installed and would send events (a transport, a config file
    or a connection configured; not ``[openlineage] disabled``)."""
    try:
        from airflow.providers.openlineage import conf
    except ImportError:
        return False
    try:
        return not conf.is_disabled()
    except Exception:  # a malformed [openlineage] section: the provider says so itself
        return False


__all__ = ["FACET_NAME", "PUBLISHED", "SCHEMA_URL", "facet_schema", "run_facets"]
