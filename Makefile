# Two commands a newcomer needs: `make demo` (the main job) and `make test` (the test suite).
# Both build the virtual environment they need from nothing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The oldest supported Airflow, in an environment of its own (docs/deployment.md).
VENV32 ?= .venv-airflow32
PY32 := $(VENV32)/bin/python
CONSTRAINTS32 := constraints/airflow-3.2.txt
# What touches Airflow's APIs (operator, scheduler, hook, plugin and UI, metrics, compat), and
# the store's SQL, schema and faults, and the outbox through XComs (SQLAlchemy 2.0 and alembic
# 1.18 here, 2.1 and 1.20 on 3.3).
# The integrations too: the OpenLineage provider's facet methods, asset events' extra and
# triggering_asset_events, MLflow in a task (both extras resolve with the 3.2 constraints).
# Left to the 3.3 run: the Airflow-free CLI, reports, charts and access rules, and the store's
# concurrency (the databases' locking, not SQLAlchemy's version); the extras' absence.
TESTS32 := tests/test_airflow_compat.py tests/test_dags.py tests/operators/test_operator*.py \
           tests/operators/test_bad_inputs.py tests/operators/test_metrics_statsd.py \
           tests/operators/test_celery_topology.py tests/operators/test_faults.py \
           tests/core/store/test_store_location.py tests/core/store/test_store_trials.py \
           tests/core/store/test_store_schema.py tests/core/store/test_store_faults.py \
           tests/plugins/test_ui_app.py tests/plugins/test_ui_server.py \
           tests/plugins/test_ui_browser.py tests/integrations/test_integration_openlineage.py \
           tests/integrations/test_integration_assets.py tests/integrations/test_integration_mlflow.py
# Left to the 3.3 run as well, each for a faster test on 3.2 that proves its Airflow-facing part:
# the demo as a subprocess (its Airflow side, demo_runs: db.initdb and dag.test of the replay
# DAG, runs in-process in test_a_second_demo_goes_on_from_the_day_after), and the DDP example
# DAG's run (the ranks are Airflow-free; the operator's dag.test path runs for the other DAGs).
DESELECT32 := \
	--deselect tests/operators/test_operator_demo.py::test_the_demo_runs_days_through_airflow_and_reports \
	--deselect "tests/test_dags.py::test_a_run_of_each_dag_succeeds_and_labels_its_figures[ddp_retrain-simulated]"

.PHONY: setup demo test suite test-fast acceptance lint clean setup-airflow32 test-airflow32

# $(1): the venv, $(2): what is added to `-e .[dev]` (constraints).
# uv resolves and installs `.[dev]` (about 200 packages) in seconds where pip took about a
# minute of CPU (bench/RESULTS.md, issue 26); it comes from PyPI into the venv itself.
# torch goes through pip: uv would not see the machine's CPU wheel of torch that pip's
# configuration points to, and a bare `torch` requirement would pull a multi-GB CUDA build.
# --no-deps --no-compile: uv installs torch's own requirements with the rest, and Python
# compiles what the tests import on first use rather than all of torch up front.
define make_venv
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --no-compile uv
	$(1)/bin/python -m pip install -q --no-deps --no-compile torch==2.13.0
	$(1)/bin/uv pip install -q --python $(1)/bin/python --upgrade-package pip pip -e ".[dev]" $(2)
	# An editable install leaves egg-info in the checkout; run from here, Python would then see
	# the distribution twice and Airflow would register the plugin twice.
	rm -rf zeus_airflow.egg-info
	touch $(1)/.installed
endef

# Airflow 3.3 asked for by name: from nothing, uv takes the newest fastapi that mlflow-skinny
# (the [mlflow] extra) accepts and then backs Airflow off to 3.2.2, the last that does not cap
# fastapi, which breaks with it (constraints/airflow-3.2.txt says how); a venv that had 3.3
# kept it, which hid this from all but a fresh clone.
$(VENV)/.installed: pyproject.toml
	$(call make_venv,$(VENV),"apache-airflow>=3.3")

setup: $(VENV)/.installed

$(VENV32)/.installed: pyproject.toml $(CONSTRAINTS32)
	$(call make_venv,$(VENV32),-c $(CONSTRAINTS32))

setup-airflow32: $(VENV32)/.installed

demo: setup
	$(VENV)/bin/zeus-airflow demo

lint: setup
	$(VENV)/bin/ruff check zeus_airflow tests bench dags
	$(VENV)/bin/ruff format --check zeus_airflow tests bench dags
	$(VENV)/bin/mypy

# Everything but the 20-day acceptance run (pyproject's addopts leave it out).
# Three processes (pytest-xdist) on 2 cores: many tests wait on servers and subprocesses, and
# with two the cores were busy 76 % of the suite (848 s of CPU in 557 s; three: 451 s,
# bench/RESULTS.md). Each process has its own Airflow home, PostgreSQL database and session
# fixtures (the UI's api-server too). Slow tests go first (tests/conftest.py) and an idle
# process takes tests still queued for another (worksteal), so that all finish together
# rather than one waiting on a long test.
XDIST := -n 3 --dist worksteal

test: lint suite

# The suite alone: .ci/run runs lint beside the Airflow 3.2 install, then this.
suite: setup
	bash scripts/test-services.sh
	$(PY) -m pytest -q $(XDIST)

# The inner loop while working: no servers, browser, Celery, Docker or subprocess trainings
# (the `slow` marker, tests/conftest.py); no lint. `make test` before a stop.
test-fast: setup
	bash scripts/test-services.sh
	$(PY) -m pytest -q $(XDIST) -m "not slow and not acceptance"

# The noise acceptance test's full 20 days through the real scheduler (~10 minutes): for a
# change to the policy. Not part of `make test` or CI (docs/algorithm.md, "The first rule").
acceptance: setup
	bash scripts/test-services.sh
	$(PY) -m pytest -q -m acceptance tests/operators/test_acceptance_noise.py

# The operator, store, UI and scheduler tests on Airflow 3.2 (`make test` runs all on 3.3).
test-airflow32: setup-airflow32
	bash scripts/test-services.sh
	$(PY32) -m pytest -q $(XDIST) $(TESTS32) $(DESELECT32)

clean:
	rm -rf $(VENV) $(VENV32) artifacts .pytest_cache .mypy_cache .ruff_cache
