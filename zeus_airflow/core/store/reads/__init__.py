"""The store's read-model: every read the reports (and through them the UI and the CLI)
make, on one connection the store opened for reading. Reports compute on what it returns
and write no SQL; the store decides nothing here either (the policy's view of a job is the
reports', from :meth:`~JobReads.job_state`)."""

from zeus_airflow.core.store.reads.fleet import FleetReads, LatestTry
from zeus_airflow.core.store.reads.history import HistoryReads, JobPast
from zeus_airflow.core.store.reads.jobs import JobReads
from zeus_airflow.core.store.reads.profiles import ProfileReads
from zeus_airflow.core.store.reads.protocol import Reader
from zeus_airflow.core.store.reads.trials import (
    Alike,
    PlaceSums,
    RunCount,
    TrialReads,
)


class SQLReader(HistoryReads, JobReads, TrialReads, ProfileReads, FleetReads):
    """The SQLAlchemy :class:`Reader` that :meth:`SQLStore.reader` hands out."""


__all__ = [
    "Alike",
    "JobPast",
    "LatestTry",
    "PlaceSums",
    "Reader",
    "RunCount",
    "SQLReader",
]
