"""Training code as people write it, driven through a :class:`~zeus_airflow.TrainingRun`.

- :mod:`zeus_airflow.integrations.huggingface`: a ``transformers`` ``TrainerCallback``
  (``pip install 'zeus-airflow[huggingface]'``);
- :mod:`zeus_airflow.integrations.lightning`: a Lightning ``Callback``
  (``pip install 'zeus-airflow[lightning]'``);
- :mod:`zeus_airflow.integrations.distributed`: several processes on one node (torchrun-style
  DDP) launched by the task, rank 0 reporting to it over a local socket.

Each calls the run's step/epoch API (``begin_epoch``, ``end_step``, ``end_epoch``,
``report_metric``, ``should_stop``) from the framework's hooks, so the profiler, the monitor and
the early-stop check behave as in a plain ``run.epochs()`` loop. Importing this package imports
no framework; each module imports its own and names the extra when it is missing.
See docs/frameworks.md.

And a run's figures where teams already look (docs/integrations.md; Airflow layer):

- :mod:`zeus_airflow.integrations.published`: the run's record, from the figures' declaration;
- :mod:`zeus_airflow.integrations.publishing`: the operator's side (OpenLineage's facet
  methods, the outlets' Asset events, MLflow's run);
- :mod:`zeus_airflow.integrations.openlineage`: the ``zeus`` run facet and its schema
  (``pip install 'zeus-airflow[openlineage]'``);
- :mod:`zeus_airflow.integrations.mlflow`: metrics, params and tags of an MLflow run
  (``pip install 'zeus-airflow[mlflow]'``).
"""
