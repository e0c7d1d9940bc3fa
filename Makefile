# Two commands a newcomer needs: `make demo` (the main job) and `make test` (the test suite).
# Both build the virtual environment they need from nothing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	# An editable install leaves egg-info in the checkout; run from here, Python would then see
	# the distribution twice and Airflow would register the plugin twice.
	rm -rf zeus_airflow.egg-info
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/zeus-airflow demo

lint: setup
	$(VENV)/bin/ruff check zeus_airflow tests bench dags
	$(VENV)/bin/mypy

test: setup lint
	bash scripts/test-services.sh
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) artifacts .pytest_cache .mypy_cache .ruff_cache
