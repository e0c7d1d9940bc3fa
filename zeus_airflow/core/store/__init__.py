"""Where job state lives: the interface (``base``), its SQLAlchemy implementation (``sql``),
and how a store is found and opened (``location``)."""

from zeus_airflow.core.store.base import Store, StoreError, TrialStart, UnrecordedResultError
from zeus_airflow.core.store.location import StoreLocation, open_store, resolve_location
from zeus_airflow.core.store.sql import SQLStore

__all__ = [
    "SQLStore",
    "Store",
    "StoreError",
    "StoreLocation",
    "TrialStart",
    "UnrecordedResultError",
    "open_store",
    "resolve_location",
]
