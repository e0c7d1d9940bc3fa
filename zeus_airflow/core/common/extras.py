"""Optional dependencies: what needs an extra, and the message when it is missing.

The base install is what the scheduler, the api-server and a worker running someone else's
train function need. PyTorch and matplotlib are extras, because those images would otherwise
carry libraries of hundreds of MB to GBs that they never import:

- ``examples``: torch, for the Capriccio experiment and the example DAGs that train real models
  (a user's own train function brings its own framework);
- ``plots``: matplotlib, for the PNGs of ``simulate``, ``drift-experiment`` and ``capriccio``;
- ``huggingface``: transformers and accelerate, for ``zeus_airflow.integrations.huggingface``
  (the Trainer callback);
- ``lightning``: Lightning, for ``zeus_airflow.integrations.lightning`` (the Callback);
- ``mlflow``: mlflow-skinny, for an operator's ``mlflow_experiment``
  (``zeus_airflow.integrations.mlflow``: its absence is a warning, never a failed task);
- ``openlineage``: Airflow's OpenLineage provider, which asks Zeus tasks for their ``zeus``
  facet (``zeus_airflow.integrations.openlineage``: without it, nothing asks).

A feature that needs one imports it through :func:`require` (or hands the import's
``ModuleNotFoundError`` to :func:`raise_naming_extra`), so the error names the command to run
rather than only the missing module.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NoReturn

from zeus_airflow.core.common.config import ConfigError

EXTRAS: dict[str, str] = {
    "torch": "examples",
    "matplotlib": "plots",
    "transformers": "huggingface",
    "accelerate": "huggingface",
    "lightning": "lightning",
    "mlflow": "mlflow",
}
"""Top-level module -> the extra of zeus-airflow that installs it."""


class MissingExtraError(ImportError):
    """A feature needs a module that only an extra of zeus-airflow installs."""


def raise_naming_extra(err: ModuleNotFoundError, feature: str) -> NoReturn:
    """Raise :class:`MissingExtraError` when ``err`` is one of :data:`EXTRAS` missing, else
    ``err`` itself: a module missing inside an installed torch (a broken build) is not cured
    by the extra, and saying so would mislead."""
    if err.name not in EXTRAS:
        raise err
    raise MissingExtraError(
        f"{feature} needs {err.name}, which the base install of zeus-airflow leaves out: "
        f"pip install 'zeus-airflow[{EXTRAS[err.name]}]'",
        name=err.name,
    ) from err


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (a key of :data:`EXTRAS`) for ``feature``, or say which extra to
    install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise_naming_extra(err, feature)


def check_installed(module: str, feature: str) -> None:
    """For commands: fail as a usage error (exit 2, no traceback) before any long work starts
    rather than after it, when an option asks for something the install lacks."""
    try:
        require(module, feature)
    except MissingExtraError as err:
        raise ConfigError(str(err)) from err
