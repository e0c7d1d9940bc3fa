"""A StatsD server for tests: a UDP socket on 127.0.0.1 that keeps every line it receives."""

from __future__ import annotations

import socket
import threading
import time


class StatsDListener:
    """A UDP socket on 127.0.0.1 that keeps every StatsD line it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            self.lines.extend(data.decode().splitlines())

    def gauges(self, prefix: str) -> dict[str, float]:
        """``name -> value`` of the gauges whose name starts with ``prefix``."""
        found = {}
        for line in self.lines:
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            if kind == "g" and name.startswith(prefix):
                found[name] = float(value)
        return found

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()

    def wait_for(self, prefix: str, count: int, timeout_s: float = 10.0) -> dict[str, float]:
        """The gauges under ``prefix`` once ``count`` have arrived (or after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while len(self.gauges(prefix)) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.gauges(prefix)
