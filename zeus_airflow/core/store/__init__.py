"""Where job state lives: the interface (``base``) and its SQLAlchemy implementation (``sql``)."""

from zeus_airflow.core.store.base import (
    DeviceInfo,
    JobRef,
    RecurrenceKey,
    Store,
    StoreError,
    TrialStart,
)

__all__ = ["DeviceInfo", "JobRef", "RecurrenceKey", "Store", "StoreError", "TrialStart"]
