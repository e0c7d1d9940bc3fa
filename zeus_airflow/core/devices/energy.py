"""Energy of a group of GPUs from what their driver offers: cumulative counters, or power.

Shared by every backend that reads real GPUs (NVML directly, or through zeusd): both speak mJ
counters and mW power per GPU, and both meet the same failure, a counter that goes backwards
(the driver, or the daemon, restarted).
"""

from __future__ import annotations

import itertools
import logging
import statistics
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class CounterSource(Protocol):
    """GPUs with cumulative energy counters (mJ), their power (W) and clock (s)."""

    indices: tuple[int, ...]

    def read_counters_mj(self) -> list[int]: ...

    def power_w(self) -> list[float]: ...

    def now_s(self) -> float: ...


def probe_update_period_s(
    read_mj: Callable[[], int], clock: Callable[[], float], *, max_s: float = 1.0
) -> float:
    """How often an energy counter advances (s), by reading it until it advanced three times.

    Real counters advance in steps, not continuously: an H200's every 0.1 s (bench/RESULTS.md,
    "Real GPU check"), so a window only a few updates long reads up to one update's energy too
    much or too little. Returns the median time between the reads that first saw each advance
    (off by at most the time one read takes); 0.0 when every read saw an advance (continuous
    at the rate it can be read) or the clock stands still (a test's manual clock); ``max_s``
    when it advanced less often than that.
    """
    start_s = last_s = clock()
    value, held = read_mj(), False
    advanced_at_s: list[float] = []
    while len(advanced_at_s) < 3:
        reading, now_s = read_mj(), clock()
        if now_s <= last_s:
            return 0.0
        if now_s - start_s > max_s:
            return max_s
        if reading != value:
            advanced_at_s.append(now_s)
            value = reading
        else:
            held = True
        last_s = now_s
    if not held:
        return 0.0
    return statistics.median(b - a for a, b in itertools.pairwise(advanced_at_s))


class EnergyCounters:
    """Energy from the GPUs' counters, summed as increments between reads.

    The counter is mJ since the driver was loaded: reloading the driver (or a driver bug)
    makes it go backwards. Such an interval is bridged with the power read now times the time
    since the last read, and said once; the counters are never trusted to be monotonic.
    """

    def __init__(self, gpus: CounterSource) -> None:
        self._gpus = gpus
        self._last_mj = gpus.read_counters_mj()
        self._last_s = gpus.now_s()
        self._total_mj = 0.0
        self._warned = False
        self._lock = threading.Lock()
        self._update_period_s: float | None = None

    def update_period_s(self) -> float:
        """How often the first GPU's counter advances (s; the group's GPUs share a model and
        a driver), probed at the first call: up to a few updates' time, once."""
        if self._update_period_s is None:
            self._update_period_s = probe_update_period_s(
                lambda: self._gpus.read_counters_mj()[0], self._gpus.now_s
            )
        return self._update_period_s

    def energy_j(self) -> float:
        with self._lock:
            now_mj, now_s = self._gpus.read_counters_mj(), self._gpus.now_s()
            power_w: list[float] | None = None
            for position, (now, last) in enumerate(zip(now_mj, self._last_mj, strict=True)):
                if now >= last:
                    self._total_mj += now - last
                    continue
                if power_w is None:
                    power_w = self._gpus.power_w()
                self._total_mj += power_w[position] * (now_s - self._last_s) * 1000.0
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "the energy counter of GPU %d went backwards (%d -> %d mJ: the "
                        "driver was reloaded?); that interval is estimated from its "
                        "power draw",
                        self._gpus.indices[position],
                        last,
                        now,
                    )
            self._last_mj, self._last_s = now_mj, now_s
            return self._total_mj / 1000.0


class PowerIntegrator:
    """Energy (J) as the trapezoid integral of sampled power over the clock.

    The thread starts on the first reading and samples every ``interval_s``; each reading also
    takes a sample, so a measurement window's edges are exact in time.
    """

    def __init__(
        self, read_power_w: Callable[[], float], clock: Callable[[], float], interval_s: float
    ) -> None:
        self._read_power_w = read_power_w
        self._clock = clock
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._energy_j = 0.0
        self._last: tuple[float, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def energy_j(self) -> float:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, daemon=True, name="zeus-power-sampler"
            )
            self._sample()
            self._thread.start()
        return self._sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> float:
        with self._lock:
            now_s, power_w = self._clock(), self._read_power_w()
            if self._last is not None:
                last_s, last_w = self._last
                self._energy_j += (now_s - last_s) * (power_w + last_w) / 2.0
            self._last = (now_s, power_w)
            return self._energy_j


class CountedOrSampled:
    """What NVML's and AMD SMI's GPU groups share: energy from the counters when every GPU
    has one, else from sampled power, and the clock it follows (``controlled.py`` has the
    rest, which zeusd's group shares too)."""

    _counters: EnergyCounters | None
    _sampler: PowerIntegrator | None
    _clock: Callable[[], float]
    _sync: Callable[[], None]

    def energy_j(self) -> float:
        if self._sampler is not None:
            return self._sampler.energy_j()
        assert self._counters is not None
        return self._counters.energy_j()

    def now_s(self) -> float:
        return self._clock()
