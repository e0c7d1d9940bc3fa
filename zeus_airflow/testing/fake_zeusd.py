"""A fake zeusd: a local HTTP server that speaks zeusd's documented API over a Unix socket.

It stands for the privileged daemon of upstream Zeus (docs/zeusd/api.md in ml-energy/zeus) in
tests and for users trying a DAG without a GPU. Its GPUs are a :class:`FakeNVML` (the daemon
is root, so it may set limits unless the fake says otherwise): NVIDIA or AMD alike, since
zeusd presents both the same way. NVML's refusals become zeusd's statuses (no permission:
403; out of range, not supported: 400; anything else: 500).

```python
with FakeZeusd(tmp_path / "zeusd.sock", FakeNVML(2), tokens={"t": {"gpu-read"}}) as daemon:
    os.environ["ZEUSD_SOCK_PATH"] = str(daemon.socket_path)
    ...
    daemon.requests          # [("POST", "/gpu/set_power_limit", {...}), ...]
    daemon.fail("/gpu/set_power_limit", 500)    # every later call of that path answers 500
    daemon.stop()            # the daemon goes away: the socket is removed
```

It binds only to the Unix socket it is given, serves from a daemon thread, and stops by
itself after ``lifetime_s`` (10 minutes by default) if the test never stops it.
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pynvml

from zeus_airflow.core.devices import milliwatts
from zeus_airflow.testing.fake_nvml import FakeNVML, pci_address

ALL_GROUPS = ("gpu-control", "gpu-read", "cpu-read")
DEFAULT_LIFETIME_S = 600.0


@dataclass
class FakeCPU:
    """One CPU package as RAPL through the daemon: constant power over the fake's clock."""

    cpu_w: float = 60.0
    dram_w: float | None = 8.0


@dataclass
class _State:
    nvml: FakeNVML
    groups: frozenset[str]
    tokens: dict[str, frozenset[str]] | None
    cpus: list[FakeCPU]
    started_s: float
    pci: list[str]
    failures: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


class FakeZeusd:
    """zeusd over ``nvml``'s GPUs at ``socket_path``. ``groups``: the API groups served;
    ``tokens``: token -> scopes, which makes the daemon require one (None: no auth);
    ``cpus``: the RAPL packages it reads (none: an empty ``cpus`` list in /discover);
    ``pci_addresses``: each GPU's (the fake NVML's, ``0000:<17+i>:00.0``, by default)."""

    def __init__(
        self,
        socket_path: str | Path,
        nvml: FakeNVML,
        *,
        groups: Iterable[str] = ALL_GROUPS,
        tokens: Mapping[str, Iterable[str]] | None = None,
        cpus: Iterable[FakeCPU] = (FakeCPU(),),
        pci_addresses: Iterable[str] | None = None,
        lifetime_s: float = DEFAULT_LIFETIME_S,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.nvml = nvml
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        pci = (
            list(pci_addresses)
            if pci_addresses is not None
            else [pci_address(i) for i in range(count)]
        )
        self.state = _State(
            nvml,
            frozenset(groups),
            None if tokens is None else {t: frozenset(s) for t, s in tokens.items()},
            list(cpus),
            nvml.clock(),
            pci,
        )
        self._server = _Server(str(self.socket_path), _handler(self.state))
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="fake-zeusd"
        )
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True
        self._stopped = False

    def __enter__(self) -> FakeZeusd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FakeZeusd:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        """The daemon goes away: no more answers, the socket file removed. Safe twice."""
        if self._stopped:
            return
        self._stopped = True
        self._timer.cancel()
        if self._thread.is_alive():  # shutdown() waits for serve_forever, which must run
            self._server.shutdown()
        self._server.server_close()
        self.socket_path.unlink(missing_ok=True)
        self.nvml.nvmlShutdown()

    @property
    def requests(self) -> list[tuple[str, str, dict[str, str]]]:
        """(method, path, query) of every request, in order."""
        return self.state.requests

    def fail(self, path: str, status: int) -> None:
        """Every later request of ``path`` answers ``status`` (0: answer normally again)."""
        if status:
            self.state.failures[path] = status
        else:
            self.state.failures.pop(path, None)

    def set_limit_calls(self) -> list[tuple[int, int]]:
        """(GPU id, mW) of every set_power_limit request, in order."""
        return [
            (int(gpu), int(q["power_limit_mw"]))
            for method, path, q in self.requests
            if path == "/gpu/set_power_limit"
            for gpu in q["gpu_ids"].split(",")
        ]


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, handler: type[BaseHTTPRequestHandler]) -> None:
        Path(path).unlink(missing_ok=True)
        super().__init__(path, handler)


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            state.requests.append((method, url.path, query))
            status, body = _answer(
                state, method, url.path, query, self.headers.get("Authorization", "")
            )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``requests``."""

        def address_string(self) -> str:
            return "unix"

    return Handler


_GROUP_OF = {
    "/gpu/set_power_limit": "gpu-control",
    "/gpu/get_cumulative_energy": "gpu-read",
    "/gpu/get_power": "gpu-read",
    "/gpu/get_power_limit": "gpu-read",
    "/gpu/get_power_limit_constraints": "gpu-read",
    "/cpu/get_cumulative_energy": "cpu-read",
}


def _answer(
    state: _State, method: str, path: str, query: dict[str, str], authorization: str
) -> tuple[int, Any]:
    if path in state.failures:
        return state.failures[path], {"error": f"injected failure of {path}"}
    if path == "/discover":
        return 200, _discover(state)
    scopes = _scopes(state, authorization)
    if path == "/auth/whoami":
        if state.tokens is None:
            return 404, {"error": "auth is disabled"}
        return (
            (401, {"error": "invalid token"})
            if scopes is None
            else (200, {"sub": "airflow", "scopes": sorted(scopes)})
        )
    group = _GROUP_OF.get(path)
    if group is None or group not in state.groups:
        return 404, {"error": f"{path} is not served"}
    if state.tokens is not None and scopes is None:
        return 401, {"error": "missing or invalid token"}
    if scopes is not None and group not in scopes:
        return 403, {"error": f"the token lacks the {group} scope"}
    if (method == "POST") != (group == "gpu-control"):
        return 400, {"error": f"{method} {path} is not allowed"}
    return _ROUTES[path](state, query)


def _scopes(state: _State, authorization: str) -> frozenset[str] | None:
    """The token's scopes; None without auth, or for a missing or unknown token."""
    if state.tokens is None:
        return None
    token = authorization.removeprefix("Bearer ").strip()
    return state.tokens.get(token)


def _discover(state: _State) -> dict[str, Any]:
    nvml = state.nvml
    gpus = []
    for i, pci in enumerate(state.pci):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        gpus.append(
            {
                "id": i,
                "name": milliwatts.text(nvml.nvmlDeviceGetName(handle)),
                "pci_address": pci,
                "cumulative_energy_available": handle.spec.energy_counter,
            }
        )
    return {
        "gpus": gpus,
        "cpus": [
            {"id": i, "dram_available": c.dram_w is not None} for i, c in enumerate(state.cpus)
        ],
        "enabled_api_groups": sorted(state.groups),
        "auth_required": state.tokens is not None,
    }


def _per_gpu(state: _State, query: dict[str, str], read: Callable[[Any], Any]) -> tuple[int, Any]:
    ids = (
        [int(i) for i in query["gpu_ids"].split(",")]
        if query.get("gpu_ids")
        else list(range(len(state.pci)))
    )
    answer: dict[str, Any] = {}
    for i in ids:
        try:
            answer[str(i)] = read(state.nvml.nvmlDeviceGetHandleByIndex(i))
        except pynvml.NVMLError as err:
            return _status(err), {"errors": {str(i): str(err)}}
    return 200, answer


def _set_power_limit(state: _State, query: dict[str, str]) -> tuple[int, Any]:
    limit_mw = int(query["power_limit_mw"])

    def set_one(handle: Any) -> dict[str, Any]:
        state.nvml.nvmlDeviceSetPowerManagementLimit(handle, limit_mw)
        return {}

    return _per_gpu(state, query, set_one)


def _get_power(state: _State, query: dict[str, str]) -> tuple[int, Any]:
    status, answer = _per_gpu(state, query, state.nvml.nvmlDeviceGetPowerUsage)
    if status != 200:
        return status, answer
    return 200, {"timestamp_ms": int(state.nvml.clock() * 1000), "power_mw": answer}


def _cpu_energy(state: _State, query: dict[str, str]) -> tuple[int, Any]:
    elapsed_s = state.nvml.clock() - state.started_s
    return 200, {
        str(i): {
            "cpu_energy_uj": round(c.cpu_w * elapsed_s * 1e6),
            "dram_energy_uj": None if c.dram_w is None else round(c.dram_w * elapsed_s * 1e6),
        }
        for i, c in enumerate(state.cpus)
    }


def _status(err: pynvml.NVMLError) -> int:
    if err.value == pynvml.NVML_ERROR_NO_PERMISSION:
        return 403
    if err.value in (pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_SUPPORTED):
        return 400
    return 500


_ROUTES: dict[str, Callable[[_State, dict[str, str]], tuple[int, Any]]] = {
    "/gpu/set_power_limit": _set_power_limit,
    "/gpu/get_power_limit": lambda s, q: _per_gpu(
        s, q, lambda h: {"power_limit_mw": s.nvml.nvmlDeviceGetPowerManagementLimit(h)}
    ),
    "/gpu/get_power_limit_constraints": lambda s, q: _per_gpu(
        s,
        q,
        lambda h: dict(
            zip(
                ("min_power_limit_mw", "max_power_limit_mw"),
                s.nvml.nvmlDeviceGetPowerManagementLimitConstraints(h),
                strict=True,
            )
        ),
    ),
    "/gpu/get_cumulative_energy": lambda s, q: _per_gpu(
        s, q, lambda h: {"energy_mj": s.nvml.nvmlDeviceGetTotalEnergyConsumption(h)}
    ),
    "/gpu/get_power": _get_power,
    "/cpu/get_cumulative_energy": _cpu_energy,
}
