"""Output files the CLI writes: checked before the work that fills them."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from pathlib import Path

from zeus_airflow.core.common.config import ConfigError


def check_writable(name: str, path: Path) -> None:
    """Refuse an output file that cannot be written, before the work that would fill it.

    Raises ConfigError naming the option (``name``). The file is created to try, and removed
    again when it did not exist before; missing parent folders are created (as the writers
    would)."""
    if path.is_dir():
        raise ConfigError(
            f"{name}={str(path)!r} is invalid: it is a folder; expected the path of a file to write"
        )
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except FileExistsError as err:  # a file stands where a parent folder should be
        raise ConfigError(
            f"{name}={str(path)!r} is invalid: {err.filename} is a file, not a "
            "folder; expected a writable file path"
        ) from None
    except OSError as err:
        raise ConfigError(
            f"{name}={str(path)!r} is invalid: cannot write there "
            f"({err.strerror}: {err.filename}); expected a writable file path"
        ) from None
    if not existed:
        path.unlink()


def write_csv(path: Path, columns: list[str], rows: Iterable[Mapping[str, object]]) -> None:
    """Write ``rows`` under a header of ``columns``, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
