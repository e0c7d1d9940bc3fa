"""The Airflow layer: the training operator and its link to the job's page."""

from zeus_airflow.operators.links import ZeusJobLink
from zeus_airflow.operators.train import ZeusTrainOperator

__all__ = ["ZeusJobLink", "ZeusTrainOperator"]
