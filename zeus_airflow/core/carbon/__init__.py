"""Carbon- and price-aware retraining, Airflow-free: the grid's intensity and price from a
fixed value, a CSV trace or the Electricity Maps API (``signal``, ``fixed``, ``csvtrace``,
``electricitymaps``), a run's emissions over its span (``accounting``), the start that
minimises them before a deadline (``planner``), what the job's history expects of its next
run (``expected``), and how the operator's options name a source (``options``). Every entry
point plans and accounts through ``service``."""
