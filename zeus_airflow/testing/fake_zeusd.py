"""A fake zeusd: a local HTTP server that answers as zeusd does, over a Unix socket or TCP.

It stands for the privileged daemon of upstream Zeus (ml-energy/zeus, ``zeusd/``) in tests
and for users trying a DAG without a GPU. Its GPUs are a :class:`FakeNVML` (the daemon is
root, so it may set limits unless the fake says otherwise).

It is strict where zeusd is. Every route takes the query parameters zeusd's route takes, and
answers what zeusd answers to anything else (facts from zeusd's ``src/routes/`` and its own
tests, at the 0.5.0 release and after):

- a query serde cannot read is ``400`` with a plain-text ``Query deserialize error: ...``:
  a parameter missing (a set without ``block``), one it does not know (``deny_unknown_fields``),
  a boolean other than ``true``/``false`` (``block=maybe``), a number that is not a ``u32``
  (``power_limit_mw=300.5``), a parameter given twice;
- an empty or malformed ``gpu_ids`` is ``400`` ``{"error": ...}``; a GPU the daemon does not
  have is ``400`` (``GPU index 7 does not exist.`` on a write, ``{"error": "GPU 7 not
  found"}`` on a read);
- per-GPU failures are ``{"errors": {"<id>": "<message>"}}`` with the worst status: the
  driver's no-permission ``403``, invalid argument and not-supported ``400``, anything else
  ``500``; a non-blocking set answers ``200`` at once and drops its failure, as zeusd does;
- a limit outside the GPU's range goes to the driver, and NVML's error comes back as the
  GPU's (zeusd checks no range itself);
- ``/cpu/get_cumulative_energy`` needs both ``cpu`` and ``dram``; a group the daemon does not
  serve, and a route asked with the wrong method, is actix's ``404`` with an empty body (no
  route matches: actix answers no ``405``; a group not enabled says so in a JSON 404, before
  any token check); a missing or unknown token ``401`` with
  ``WWW-Authenticate: Bearer realm="zeusd"``, a token without the group's scope ``403``
  naming the user, the scope and the token's scopes, all with a JSON ``{"error": ...}`` in
  zeusd's words (``zeusd/src/auth.rs``); ``/auth/whoami`` on a daemon without auth ``404``.

``api`` picks what ``/discover`` says of a GPU: ``"0.5.0"`` (the release: ``{id, name}``) or
``"head"`` (upstream after #252: also ``pci_address`` and ``cumulative_energy_available``;
there, reading the counter of a GPU without one is ``400`` as well).

```python
with FakeZeusd(tmp_path / "zeusd.sock", FakeNVML(2), api="0.5.0") as daemon:  # or tcp=True
    os.environ.update(daemon.env())   # ZEUSD_SOCK_PATH (ZEUSD_HOST_PORT with tcp=True)
    ...
    daemon.requests          # [("POST", "/gpu/set_power_limit", {...}), ...]
    daemon.answers           # [(path, status), ...]
    daemon.fail("/gpu/set_power_limit", 500)    # every later call of that path answers 500
    daemon.hang("/gpu/get_cumulative_energy")   # accepts, never answers (until release())
    daemon.stop()            # the daemon goes away: the socket is removed
```

It listens only on the Unix socket it is given or on 127.0.0.1 (a free port), serves from
daemon threads, and stops by itself after ``lifetime_s`` (10 minutes by default).
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import pynvml

from zeus_airflow.core.devices import milliwatts
from zeus_airflow.testing.fake_nvml import FakeNVML, pci_address

ALL_GROUPS = ("gpu-control", "gpu-read", "cpu-read")
DEFAULT_LIFETIME_S = 600.0
NO_TOKEN = "Authentication required. Provide an Authorization: Bearer <token> header."
INVALID_TOKEN = "Invalid token: InvalidToken"
"""zeusd's 401 bodies' errors: no ``Bearer`` token, and one jsonwebtoken cannot decode."""
CHALLENGE = 'Bearer realm="zeusd"'
"""zeusd's ``WWW-Authenticate`` on a 401."""
TOKEN_USER = "airflow"
"""The ``sub`` of the fake's tokens (zeusd's tokens name their user)."""
API = Literal["0.5.0", "head"]
APIS: tuple[API, ...] = ("0.5.0", "head")

U32_MAX = 2**32 - 1


@dataclass
class FakeCPU:
    """One CPU package as RAPL through the daemon: constant power over the fake's clock."""

    cpu_w: float = 60.0
    dram_w: float | None = 8.0


@dataclass
class _State:
    nvml: FakeNVML
    api: API
    groups: frozenset[str]
    tokens: dict[str, frozenset[str]] | None
    cpus: list[FakeCPU]
    started_s: float
    pci: list[str]
    failures: dict[str, int] = field(default_factory=dict)
    hanging: set[str] = field(default_factory=set)
    released: threading.Event = field(default_factory=threading.Event)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    answers: list[tuple[str, int]] = field(default_factory=list)
    set_calls: list[tuple[int, int]] = field(default_factory=list)


class FakeZeusd:
    """zeusd over ``nvml``'s GPUs at ``socket_path``, or on 127.0.0.1 with ``tcp=True``
    (``host_port``). ``api``: ``"0.5.0"`` or ``"head"`` (module docstring); ``groups``: the
    API groups served; ``tokens``: token -> scopes, which makes the daemon require one (None:
    no auth); ``cpus``: the RAPL packages it reads; ``pci_addresses``: each GPU's (the fake
    NVML's, ``0000:<17+i>:00.0``, by default; ``head`` only)."""

    def __init__(
        self,
        socket_path: str | Path | None,
        nvml: FakeNVML,
        *,
        api: API = "head",
        tcp: bool = False,
        groups: Iterable[str] = ALL_GROUPS,
        tokens: Mapping[str, Iterable[str]] | None = None,
        cpus: Iterable[FakeCPU] = (FakeCPU(),),
        pci_addresses: Iterable[str] | None = None,
        lifetime_s: float = DEFAULT_LIFETIME_S,
    ) -> None:
        if api not in APIS or (socket_path is None) != tcp:
            raise ValueError(
                f"FakeZeusd(api={api!r}, socket_path={socket_path!r}, tcp={tcp}) is invalid: "
                f"expected api in {APIS} and either a socket path or tcp=True"
            )
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
            api,
            frozenset(groups),
            None if tokens is None else {t: frozenset(s) for t, s in tokens.items()},
            list(cpus),
            nvml.clock(),
            pci,
        )
        handler = _handler(self.state)
        self.socket_path = None if socket_path is None else Path(socket_path)
        self._server: socketserver.BaseServer
        self.host_port: str | None = None
        if tcp:
            self._server = _TCPServer(handler)
            self.host_port = f"127.0.0.1:{self._server.server_address[1]}"
        else:
            self._server = _UnixServer(str(socket_path), handler)
        # A short poll: stop() waits for the serving loop's next look (0.5 s by default).
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True, name="fake-zeusd"
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
        self.release()
        if self._thread.is_alive():  # shutdown() waits for serve_forever, which must run
            self._server.shutdown()
        self._server.server_close()
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)
        self.nvml.nvmlShutdown()

    def env(self) -> dict[str, str]:
        """The variable a task finds this daemon by: ``ZEUSD_SOCK_PATH`` or ``ZEUSD_HOST_PORT``."""
        if self.socket_path is not None:
            return {"ZEUSD_SOCK_PATH": str(self.socket_path)}
        assert self.host_port is not None
        return {"ZEUSD_HOST_PORT": self.host_port}

    @property
    def requests(self) -> list[tuple[str, str, dict[str, str]]]:
        """(method, path, query) of every request, in order."""
        return self.state.requests

    @property
    def answers(self) -> list[tuple[str, int]]:
        """(path, status) of every answer, in order."""
        return self.state.answers

    def fail(self, path: str, status: int) -> None:
        """Every later request of ``path`` answers ``status`` (0: answer normally again)."""
        if status:
            self.state.failures[path] = status
        else:
            self.state.failures.pop(path, None)

    def hang(self, path: str = "*") -> None:
        """Requests of ``path`` (``*``: every path) are accepted and never answered, until
        :meth:`release` or :meth:`stop`."""
        self.state.released.clear()
        self.state.hanging.add(path)

    def release(self) -> None:
        """Answer again; the requests held so far are dropped (their connections closed)."""
        self.state.hanging.clear()
        self.state.released.set()

    def set_limit_calls(self) -> list[tuple[int, int]]:
        """(GPU id, mW) of every set that reached the driver (refused ones included), in
        order."""
        return list(self.state.set_calls)


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, handler: type[BaseHTTPRequestHandler]) -> None:
        Path(path).unlink(missing_ok=True)
        super().__init__(path, handler)


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            pairs = parse_qsl(url.query, keep_blank_values=True)
            query = dict(pairs)
            state.requests.append((method, url.path, query))
            if state.hanging & {url.path, "*"}:
                state.released.wait()
                self.close_connection = True
                return
            status, body = answer(
                state, method, url.path, pairs, self.headers.get("Authorization", "")
            )
            state.answers.append((url.path, status))
            self._send(status, body)

        def _send(self, status: int, body: Any) -> None:
            text = isinstance(body, str)
            data = (body if text else json.dumps(body)).encode() if body is not None else b""
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", CHALLENGE)
            if data:
                kind = "text/plain; charset=utf-8" if text else "application/json"
                self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            try:
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (its deadline): as zeusd

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``requests`` and ``answers``."""

        def address_string(self) -> str:
            return "fake-zeusd"

    return Handler


# --- routes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Route:
    method: str
    group: str
    fields: tuple[tuple[str, str], ...]
    """(name, kind) in the order zeusd's query struct declares them; kind: ``ids`` (a
    required String), ``ids?`` (an optional one), ``u32``, ``bool``."""
    handler: Callable[[_State, dict[str, Any]], tuple[int, Any]]


def answer(
    state: _State, method: str, path: str, pairs: list[tuple[str, str]], authorization: str
) -> tuple[int, Any]:
    """zeusd's status and body for one request (JSON-able, or a str for text/plain)."""
    if path in state.failures:
        return state.failures[path], {"error": f"injected failure of {path}"}
    if path in ("/discover", "/time", "/auth/whoami"):
        return _always_open(state, method, path, authorization)
    route = _ROUTES.get(path)
    if route is None:
        # An unknown path needs no scope, but still a valid token where auth is on.
        refused = None if state.tokens is None else _refusal(state, authorization, None)
        return refused or (404, None)  # actix: no route matches
    if route.group not in state.groups:
        return 404, {"error": f"API group '{route.group}' is not enabled on this server."}
    if state.tokens is not None:
        refused = _refusal(state, authorization, route.group)
        if refused is not None:
            return refused
    if method != route.method:
        return 404, None  # actix: no route matches the method either
    query = _deserialize(route.fields, pairs)
    if isinstance(query, str):
        return 400, f"Query deserialize error: {query}"
    return route.handler(state, query)


def _always_open(state: _State, method: str, path: str, authorization: str) -> tuple[int, Any]:
    if method != "GET":
        return 404, None
    if path == "/discover":
        return 200, _discover(state)
    if path == "/time":
        return 200, {"timestamp_ms": int(time.time() * 1000)}
    if state.tokens is None:
        return 404, {"error": "Authentication is not enabled on this server."}
    refused = _refusal(state, authorization, None)
    if refused is not None:
        return refused
    return 200, {"sub": TOKEN_USER, "scopes": sorted(_scopes(state, authorization) or ())}


def _deserialize(fields: tuple[tuple[str, str], ...], pairs: list[tuple[str, str]]) -> Any:
    """The query as serde_urlencoded reads it into zeusd's struct, or serde's message."""
    kinds = dict(fields)
    seen: dict[str, Any] = {}
    for name, text in pairs:
        if name not in kinds:
            expected = ", ".join(f"`{n}`" for n, _ in fields)
            return f"unknown field `{name}`, expected one of {expected}"
        if name in seen:
            return f"duplicate field `{name}`"
        value = _value(kinds[name], text)
        if isinstance(value, _Invalid):
            return value.message
        seen[name] = value
    for name, kind in fields:
        if name not in seen and not kind.endswith("?"):
            return f"missing field `{name}`"
    return seen


@dataclass(frozen=True)
class _Invalid:
    message: str


def _value(kind: str, text: str) -> Any:
    if kind.startswith("ids"):
        return text
    if kind == "bool":
        return (
            {"true": True, "false": False}.get(text)
            if text in ("true", "false")
            else (_Invalid("provided string was not `true` or `false`"))
        )
    if not text:
        return _Invalid("cannot parse integer from empty string")
    if not (text.isascii() and text.lstrip("+").isdigit()):
        return _Invalid("invalid digit found in string")
    number = int(text)
    return _Invalid("number too large to fit in target type") if number > U32_MAX else number


def _ids(state: _State, raw: str | None, write: bool) -> list[int] | tuple[int, Any]:
    """zeusd's parse_device_ids: sorted, deduplicated; a status and body when refused."""
    count = len(state.pci)
    if raw is None:
        return list(range(count))
    if not raw.strip():
        return 400, {"error": "gpu_ids must contain at least one GPU index"}
    ids = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            return 400, {"error": "gpu_ids contains an empty GPU index"}
        if not (part.isascii() and part.isdigit()):
            return 400, {"error": f"Invalid GPU index: {part}"}
        ids.append(int(part))
    for i in sorted(set(ids)):
        if i >= count:
            return (
                (400, f"GPU index {i} does not exist.")
                if write
                else (
                    400,
                    {"error": f"GPU {i} not found"},
                )
            )
    return sorted(set(ids))


def _per_gpu(
    state: _State, query: dict[str, Any], read: Callable[[Any], Any], write: bool = False
) -> tuple[int, Any]:
    ids = _ids(state, query.get("gpu_ids"), write)
    if isinstance(ids, tuple):
        return ids
    answer: dict[str, Any] = {}
    errors: dict[str, tuple[int, str]] = {}
    for i in ids:
        try:
            answer[str(i)] = read(state.nvml.nvmlDeviceGetHandleByIndex(i))
        except pynvml.NVMLError as err:
            errors[str(i)] = (_status(err), f"NVML error: {err}")
    if errors:
        worst = max(status for status, _ in errors.values())
        return worst, {"errors": {i: text for i, (_, text) in errors.items()}}
    return 200, answer


def _status(err: pynvml.NVMLError) -> int:
    if err.value == pynvml.NVML_ERROR_NO_PERMISSION:
        return 403
    if err.value in (pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_SUPPORTED):
        return 400
    return 500


def _refusal(state: _State, authorization: str, group: str | None) -> tuple[int, Any] | None:
    """zeusd's auth middleware (``zeusd/src/auth.rs``): 401 without a ``Bearer`` token or
    with one it cannot decode, 403 with one that lacks ``group``'s scope; None: allowed."""
    if not authorization.startswith("Bearer "):
        return 401, {"error": NO_TOKEN}
    scopes = _scopes(state, authorization)
    if scopes is None:
        return 401, {"error": INVALID_TOKEN}
    if group is not None and group not in scopes:
        held = ", ".join(f"'{s}'" for s in sorted(scopes))
        return 403, {
            "error": f"Token for user '{TOKEN_USER}' lacks required scope '{group}'. "
            f"Token scopes: [{held}]"
        }
    return None


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
        entry: dict[str, Any] = {"id": i, "name": milliwatts.text(nvml.nvmlDeviceGetName(handle))}
        if state.api == "head":
            entry["pci_address"] = pci
            entry["cumulative_energy_available"] = handle.spec.energy_counter
        gpus.append(entry)
    return {
        "gpus": gpus,
        "cpus": [
            {"id": i, "dram_available": c.dram_w is not None} for i, c in enumerate(state.cpus)
        ],
        "enabled_api_groups": sorted(state.groups),
        "auth_required": state.tokens is not None,
    }


def _set_power_limit(state: _State, query: dict[str, Any]) -> tuple[int, Any]:
    limit_mw = query["power_limit_mw"]

    def set_one(handle: Any) -> dict[str, Any]:
        # zeusd checks no range: the driver refuses, and its error is the GPU's answer.
        state.set_calls.append((handle.index, limit_mw))
        state.nvml.nvmlDeviceSetPowerManagementLimit(handle, limit_mw)
        return {}

    ids = _ids(state, query["gpu_ids"], write=True)
    if isinstance(ids, tuple):
        return ids
    status, body = _per_gpu(state, query, set_one, write=True)
    if not query["block"] or status == 200:  # a non-blocking set reports no driver error
        return 200, None
    return status, body


def _get_power(state: _State, query: dict[str, Any]) -> tuple[int, Any]:
    status, answer = _per_gpu(state, query, state.nvml.nvmlDeviceGetPowerUsage)
    if status != 200:
        return status, answer
    return 200, {"timestamp_ms": int(time.time() * 1000), "power_mw": answer}


def _cpu_energy(state: _State, query: dict[str, Any]) -> tuple[int, Any]:
    elapsed_s = state.nvml.clock() - state.started_s
    return 200, {
        str(i): {
            "cpu_energy_uj": round(c.cpu_w * elapsed_s * 1e6) if query["cpu"] else None,
            "dram_energy_uj": None
            if c.dram_w is None or not query["dram"]
            else round(c.dram_w * elapsed_s * 1e6),
        }
        for i, c in enumerate(state.cpus)
    }


def _limit(s: _State, q: dict[str, Any]) -> tuple[int, Any]:
    return _per_gpu(s, q, lambda h: {"power_limit_mw": s.nvml.nvmlDeviceGetPowerManagementLimit(h)})


def _constraints(s: _State, q: dict[str, Any]) -> tuple[int, Any]:
    def read(handle: Any) -> dict[str, int]:
        low, high = s.nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        return {"min_power_limit_mw": low, "max_power_limit_mw": high}

    return _per_gpu(s, q, read)


def _energy(s: _State, q: dict[str, Any]) -> tuple[int, Any]:
    return _per_gpu(s, q, lambda h: {"energy_mj": s.nvml.nvmlDeviceGetTotalEnergyConsumption(h)})


_READ = (("gpu_ids", "ids?"),)
_ROUTES: dict[str, _Route] = {
    "/gpu/set_power_limit": _Route(
        "POST",
        "gpu-control",
        (("gpu_ids", "ids"), ("power_limit_mw", "u32"), ("block", "bool")),
        _set_power_limit,
    ),
    "/gpu/get_power_limit": _Route("GET", "gpu-read", _READ, _limit),
    "/gpu/get_power_limit_constraints": _Route("GET", "gpu-read", _READ, _constraints),
    "/gpu/get_cumulative_energy": _Route("GET", "gpu-read", _READ, _energy),
    "/gpu/get_power": _Route("GET", "gpu-read", _READ, _get_power),
    "/cpu/get_cumulative_energy": _Route(
        "GET", "cpu-read", (("cpu_ids", "ids?"), ("cpu", "bool"), ("dram", "bool")), _cpu_energy
    ),
}
