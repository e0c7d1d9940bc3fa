"""Workloads the example DAGs train for real (the ``examples`` extra: PyTorch)."""
