"""Airflow hooks: the store behind an Airflow Connection."""

from zeus_airflow.hooks.store import ZeusStoreHook

__all__ = ["ZeusStoreHook"]
