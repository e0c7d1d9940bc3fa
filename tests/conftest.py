"""Shared test setup. Fixture modules live beside this file, one per concern."""

pytest_plugins = ["fixtures_airflow", "fixtures_store", "fixtures_ui"]
