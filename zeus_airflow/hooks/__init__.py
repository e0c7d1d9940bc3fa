"""Airflow hooks: the store, and the Electricity Maps token, behind Airflow Connections."""

from zeus_airflow.hooks.carbon import ElectricityMapsHook
from zeus_airflow.hooks.store import ZeusStoreHook

__all__ = ["ElectricityMapsHook", "ZeusStoreHook"]
