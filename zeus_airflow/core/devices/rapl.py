"""CPU package and DRAM energy through Linux powercap sysfs (RAPL), read-only.

Intel CPUs since Sandy Bridge and AMD CPUs since Zen keep RAPL energy counters per socket;
Linux exposes them under ``/sys/class/powercap`` as power zones:

- ``intel-rapl:<socket>`` named ``package-<socket>``: the CPU package (cores, caches, uncore).
  AMD's are exposed by the same driver under the same names; a zone prefixed ``amd-rapl`` is
  read the same way;
- ``intel-rapl:<socket>:<n>`` named ``dram``: the memory attached to that socket (Intel
  servers; AMD has none). Other sub-zones (``core``, ``uncore``) lie inside the package and
  ``psys`` spans the platform, so they are left out to count nothing twice; so are the
  ``intel-rapl-mmio`` zones, which repeat the package.

Each zone's ``energy_uj`` counts µJ and wraps to 0 after ``max_energy_range_uj``; a wrap is
recognised as a decrease, so the reader must look at least once per wrap period (minutes at
full load): a thread polls every ``poll_interval_s`` while the reader is open.

Since Linux 5.10, ``energy_uj`` is readable by root only (CVE-2020-8694). When a zone cannot be
read, CPU and DRAM energy are simply not measured (None), and that is said once.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

POWERCAP_ROOT = Path("/sys/class/powercap")
DEFAULT_POLL_INTERVAL_S = 5.0

Domain = Literal["package", "dram"]
_ZONE_DIR = re.compile(r"(?:intel|amd)-rapl:(\d+)(?::\d+)?")
_PACKAGE_NAME = re.compile(r"package(?:-\d+)?")


@dataclass(frozen=True)
class RAPLZone:
    """One readable RAPL counter."""

    path: Path
    domain: Domain
    socket: int
    max_energy_range_uj: int


@dataclass(frozen=True)
class HostEnergy:
    """CPU package and DRAM energy since the reader opened, in J; None: not measured."""

    cpu_energy_j: float | None
    dram_energy_j: float | None


class RAPLReader:
    """The host's RAPL package and DRAM counters under ``root`` (a fake tree in tests)."""

    def __init__(
        self, root: str | Path = POWERCAP_ROOT, poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    ) -> None:
        self.root = Path(root)
        self.unavailable_because: str | None = None
        self.zones: tuple[RAPLZone, ...] = ()
        self._lock = threading.Lock()
        self._last_uj: dict[Path, int] = {}
        self._total_uj: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._poll_interval_s = poll_interval_s
        try:
            self.zones = _discover(self.root)
            if not self.zones:
                raise OSError(f"no RAPL package zone under {self.root}")
            for zone in self.zones:
                self._last_uj[zone.path] = _read_int(zone.path / "energy_uj")
                self._total_uj[zone.path] = 0
        except (OSError, ValueError) as err:
            self.zones = ()
            if not self.root.is_dir():  # no RAPL here at all (a VM, ARM): nothing to fix
                self.unavailable_because = f"CPU and DRAM energy are not measured: no {root}"
                log.info("%s", self.unavailable_because)
                return
            self.unavailable_because = (
                f"CPU and DRAM energy are not measured: {err}. RAPL under {self.root} is "
                "readable by root only since Linux 5.10; a udev rule or `chmod a+r "
                f"{self.root}/intel-rapl:*/energy_uj` lets training processes read it"
            )
            log.warning("%s", self.unavailable_because)

    @property
    def available(self) -> bool:
        return bool(self.zones)

    @property
    def has_dram(self) -> bool:
        return any(zone.domain == "dram" for zone in self.zones)

    def read(self) -> HostEnergy:
        """Energy since the reader opened; a zone that stops being readable makes the
        reader unavailable from then on (said once)."""
        if not self.zones:
            return HostEnergy(None, None)
        if self._thread is None and self._poll_interval_s > 0:
            self._thread = threading.Thread(target=self._poll, daemon=True, name="zeus-rapl-poller")
            self._thread.start()
        try:
            self._update()
        except (OSError, ValueError) as err:
            self.unavailable_because = f"CPU and DRAM energy are no longer measured: {err}"
            log.warning("%s", self.unavailable_because)
            self.zones = ()
            return HostEnergy(None, None)
        return HostEnergy(self._sum_j("package"), self._sum_j("dram") if self.has_dram else None)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    # --- internals ---------------------------------------------------------------------------
    def _update(self) -> None:
        with self._lock:
            for zone in self.zones:
                now = _read_int(zone.path / "energy_uj")
                last = self._last_uj[zone.path]
                # A decrease is a wrap: the counter went past max_energy_range_uj to 0.
                delta = now - last if now >= last else zone.max_energy_range_uj - last + now
                self._total_uj[zone.path] += delta
                self._last_uj[zone.path] = now

    def _sum_j(self, domain: Domain) -> float:
        return sum(self._total_uj[z.path] for z in self.zones if z.domain == domain) / 1e6

    def _poll(self) -> None:
        while not self._stop.wait(self._poll_interval_s):
            try:
                self._update()
            except (OSError, ValueError):
                return  # the next read() says it


def _discover(root: Path) -> tuple[RAPLZone, ...]:
    zones: list[RAPLZone] = []
    for path in sorted(root.iterdir()):
        match = _ZONE_DIR.fullmatch(path.name)
        if match is None:
            continue
        name = (path / "name").read_text().strip()
        domain: Domain | None = (
            "package" if _PACKAGE_NAME.fullmatch(name) else "dram" if name == "dram" else None
        )
        if domain is None:
            continue
        zones.append(
            RAPLZone(path, domain, int(match.group(1)), _read_int(path / "max_energy_range_uj"))
        )
    return tuple(zones)


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())
