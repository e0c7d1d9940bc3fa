"""Airflow fixtures (a hermetic AIRFLOW_HOME, dag.test() helpers)."""
