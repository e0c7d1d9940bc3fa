"""The ``Reader`` protocol's contract (``core/store/reads/protocol.py``), as its docstrings
state it: each read's happy path on a store holding one job with a finished run, a profile
and carbon figures, and the read on a database that went away, on SQLite and PostgreSQL (the
``db_backend`` fixture runs every test on both). The tests speak through ``Store.reader()``
and ``Reader`` alone, as ``test_store_contract.py`` does for ``Store``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from test_store_contract import (  # noqa: F401 (fixtures)
    COLUMNS,
    DEVICE,
    Gone,
    begin,
    carbon,
    config,
    deciding,
    gone,
    outcome,
    profile,
    store,
    ti,
)

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.domain import JobRef
from zeus_airflow.core.store.base import Store, StoreError
from zeus_airflow.core.store.reads import Reader


@dataclass
class Books:
    store: Store
    job: JobRef


@pytest.fixture
def books(store: Store, config: JobConfig) -> Books:  # noqa: F811
    """One job: run r1 finished at 32 (sampling), its carbon and a profile; r2 in flight."""
    job = store.register_job(config, seed=1)
    first = begin(store, job, ti("r1"), decide=deciding(32, "pruning"))
    store.finish_trial(first, outcome(32, energy_j=1500.0), observed=True)
    store.record_job_phase(first, "sampling")
    store.record_carbon(job.id, ti("r1"), carbon(12.5))
    store.save_profile(job, profile({250: 240.0, 200: 190.0}))
    begin(store, job, ti("r2"), decide=deciding(64, "exploit"))
    return Books(store, job)


def test_the_store_hands_out_a_reader(books: Books) -> None:
    with books.store.reader() as reader:
        assert isinstance(reader, Reader)


def test_jobs_versions_and_task_instances(books: Books) -> None:
    job = books.job
    with books.store.reader() as reader:
        assert [v.version for v in reader.versions([job.job_id])[job.job_id]] == [1]
        assert reader.job_dags() == {job.job_id: frozenset({"dag"})}
        assert reader.job_dags("no.such.job") == {}
        assert reader.instance_job("dag", "train") == job.job_id
        assert reader.instance_job("dag", "train", -1, "r1") == job.job_id
        assert reader.instance_job("dag", "other") is None
        assert reader.task_jobs("dag", "train") == {-1: job.job_id}
        assert reader.job_instances(job.job_id, "dag", "train") == [-1]
        assert reader.job_instance_runs(job.job_id, "dag", "train", -1) == 2


def test_the_versions_latest_state(books: Books) -> None:
    job = books.job
    with books.store.reader() as reader:
        device = reader.latest_device(job.id)
        assert device is not None and device.model == DEVICE.model
        assert reader.last_phase(job.id) == "exploit"  # the decision in flight
        assert reader.last_limit(job.id, 32) == 250
        assert reader.last_limit(job.id, 128) is None
        state = reader.job_state(job, DEVICE)
        assert state.job == job and list(state.history) == [32]  # r1's finished try
        latest = reader.latest_tries([job.id])[job.id]
        assert (latest.phase, latest.job_phase) == ("exploit", "sampling")


def test_the_latest_device_is_fixed_where_its_latest_try_could_not_change_its_limits(
    books: Books,
) -> None:
    with books.store.reader() as reader:
        device = reader.latest_device(books.job.id)
        assert device is not None and not device.limits_fixed  # r2 runs, nothing said yet
    third = begin(books.store, books.job, ti("r3"), decide=deciding(64, "exploit"))
    fixed = dataclasses.replace(outcome(64), power_control="none")  # a MIG slice, say
    books.store.finish_trial(third, fixed, observed=True)
    with books.store.reader() as reader:
        device = reader.latest_device(books.job.id)
        assert device is not None and device.limits_fixed


def test_tries_runs_and_their_sums(books: Books) -> None:
    job = books.job
    with books.store.reader() as reader:
        [row] = reader.run_tries(job.id, ti("r1"), COLUMNS)
        assert (row.status, row.batch_size, row.energy_j) == ("succeeded", 32, 1500.0)
        assert [r.status for r in reader.shown_tries(job.id, ("status",))] == [
            "succeeded",
            "running",
        ]
        [sums] = reader.place_sums([job.id])
        assert sums.energy_j == pytest.approx(1500.0)
        counts = reader.run_counts([job.id])[job.id]
        assert (counts.runs, counts.finished) == (2, 1)
        assert reader.observe_sums([job.id]) == {}  # no try trained in observe mode
        [alike] = reader.alike_runs([job.id])
        assert (alike.batch_size, alike.power_limit_w) == (32, 250)
        runs = reader.energy_by_run({job.id: 2000.0})
        assert sum(r.energy_j for r in runs) == pytest.approx(1500.0)
        assert sum(r.default_energy_j for r in runs) == pytest.approx(2000.0)  # one finished


def test_carbon_and_profiles(books: Books) -> None:
    job = books.job
    with books.store.reader() as reader:
        assert next(iter(reader.run_carbon(job.id).values())).emissions_g == 12.5
        assert reader.with_emissions([job.id]) == [job.id]
        points = reader.profile_points(job.id, 32)
        assert sorted(p[3] for p in points) == [200, 250]  # _POINT's power_limit_w
        assert len(reader.profile_points_of({job.id: 32})) == 2


def test_a_jobs_past(books: Books) -> None:
    with books.store.reader() as reader:
        past = reader.job_past(books.job.job_id)
        assert past is not None and reader.job_past("no.such.job") is None


def test_reading_raises_when_the_database_is_gone(gone: Gone) -> None:  # noqa: F811
    with pytest.raises(StoreError), gone.store.reader() as reader:
        reader.versions([gone.job.job_id])
