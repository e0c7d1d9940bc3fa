"""A fake Linux powercap tree (``/sys/class/powercap``) in any folder, for the RAPL reader.

Laid out as the kernel lays out the class folder: one folder per zone, named
``<control type>:<socket>[:<sub-zone>]``, each holding ``name``, ``energy_uj`` and
``max_energy_range_uj``. Energy is added in µJ and wraps past the range as the hardware
counter does.
"""

from __future__ import annotations

import os
from pathlib import Path


class FakePowercap:
    """Zones under ``root`` (created when missing)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def zone(self, folder: str, name: str, max_energy_range_uj: int, start_uj: int = 0) -> Path:
        path = self.root / folder
        path.mkdir()
        (path / "name").write_text(f"{name}\n")
        (path / "max_energy_range_uj").write_text(f"{max_energy_range_uj}\n")
        (path / "energy_uj").write_text(f"{start_uj}\n")
        return path

    def value(self, folder: str) -> int:
        return int((self.root / folder / "energy_uj").read_text())

    def add(self, folder: str, energy_uj: int) -> None:
        """The zone consumed ``energy_uj`` µJ; the counter wraps past its range."""
        path = self.root / folder
        range_uj = int((path / "max_energy_range_uj").read_text())
        # Replaced whole, as sysfs answers a read at once: a reader never sees it half written.
        scratch = path / ".energy_uj.new"
        scratch.write_text(f"{(self.value(folder) + energy_uj) % range_uj}\n")
        os.replace(scratch, path / "energy_uj")
