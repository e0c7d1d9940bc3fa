"""Which jobs a user sees (``plugins/access.py``): the rule, given what the auth manager
answered. The end-to-end check with a real auth manager is in test_ui_server.py."""

from __future__ import annotations

from zeus_airflow.plugins.access import DagAccess, job_in_dag

JOBS = {
    "alpha.train": frozenset({"alpha"}),
    "shared_model": frozenset({"alpha", "beta"}),
    "beta.fit": frozenset({"beta"}),
    "alpha.fresh": frozenset(),  # registered, never run: its id names its DAG
    "cli_job": frozenset(),  # ran outside Airflow only
}


def test_a_reader_of_every_dag_sees_every_job() -> None:
    assert DagAccess(all_dags=True, dag_ids=frozenset()).visible(JOBS) == sorted(JOBS)


def test_a_reader_of_one_dag_sees_its_jobs_only() -> None:
    alpha = DagAccess(all_dags=False, dag_ids=frozenset({"alpha"}))
    assert alpha.visible(JOBS) == ["alpha.fresh", "alpha.train"]
    assert alpha.may_read_dag("alpha") and not alpha.may_read_dag("beta")


def test_a_job_shared_by_two_dags_needs_both() -> None:
    both = DagAccess(all_dags=False, dag_ids=frozenset({"alpha", "beta"}))
    assert "shared_model" in both.visible(JOBS)
    assert "shared_model" not in DagAccess(False, frozenset({"beta"})).visible(JOBS)


def test_no_dag_no_job() -> None:
    assert DagAccess(all_dags=False, dag_ids=frozenset()).visible(JOBS) == []


def test_a_never_run_job_belongs_to_the_dag_its_id_names() -> None:
    assert job_in_dag("alpha.fresh", frozenset(), "alpha")
    assert not job_in_dag("alphabet.fresh", frozenset(), "alpha")
    assert not job_in_dag("alpha.train", frozenset({"beta"}), "alpha")
