"""A small client of zeusd's HTTP API (ml-energy/zeus, docs/zeusd/api.md), standard library only.

zeusd is the privileged daemon of upstream Zeus: it sets GPU power limits (NVML, and AMD SMI in
builds after 0.5.0) and reads GPU and CPU (RAPL) energy for unprivileged processes, over a Unix
socket or TCP. A process finds it through ``ZEUSD_SOCK_PATH`` (a socket path) or
``ZEUSD_HOST_PORT`` (``host:port``), and sends ``ZEUSD_TOKEN`` as a bearer token when the daemon
requires one.

Why our own client and not ``zeus.utils.zeusd.ZeusdClient`` (docs/devices.md, "zeusd"): the
upstream one comes with the ``zeus`` package and httpx, which the base install would then carry
on every scheduler and api-server; the dozen calls we need fit in ``http.client``.

Every request has a deadline (``timeout_s``, connecting included; a blocking set gets
``CONTROL_TIMEOUT_FACTOR`` times it): a daemon that accepts and never answers, or answers a
byte at a time, costs at most that. After such a stall the daemon is not asked again for
``RETRY_AFTER_S``, so a hanging daemon costs a task one deadline per half minute at most, and
the seconds each thread spent stalled are kept (:meth:`ZeusdClient.stalled_s`) so that the
device can keep them out of the try (``zeusd.py``).

Errors: an answer other than 200 is a :class:`ZeusdError` carrying the HTTP status; a daemon
that cannot be reached (not started, gone, restarting, stalled) is a
:class:`ZeusdUnreachableError`; a daemon that can never be used as configured (a malformed
variable, a socket this user may not open, something that is not zeusd) is a
:class:`ZeusdConfigError` naming the variable to fix.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from zeus_airflow.core.devices.base import DeviceError

SOCK_PATH_ENV = "ZEUSD_SOCK_PATH"
HOST_PORT_ENV = "ZEUSD_HOST_PORT"
TOKEN_ENV = "ZEUSD_TOKEN"
TIMEOUT_ENV = "ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 2.0
"""A read answers in microseconds to milliseconds; two seconds is a daemon that hangs."""
MIN_TIMEOUT_S = 0.05
"""Below this a healthy daemon's answer (milliseconds; tens of them on a busy node) would
read as a hang, and the task would blame the daemon for the value (issue 48)."""
MAX_TIMEOUT_S = 600.0
CONTROL_TIMEOUT_FACTOR = 5.0
"""A blocking set waits for the driver (an AMD GPU's sysfs write takes longer than a read)."""
RETRY_AFTER_S = 30.0
"""After a stall, how long the daemon is not asked again (each ask costs a deadline)."""

GPU_READ, GPU_CONTROL, CPU_READ = "gpu-read", "gpu-control", "cpu-read"
"""zeusd's API groups, which are also the token scopes that open them."""

_STATUS_MEANING = {
    400: "bad input, or an operation the GPU does not support",
    401: "the token is missing or invalid: set ZEUSD_TOKEN to a token the daemon accepts",
    403: "the token lacks the scope, or the driver refused (no permission)",
    404: "that API group is not enabled on the daemon (zeusd serve --enable ...)",
    500: "the daemon failed (a driver error)",
}


class ZeusdError(DeviceError):
    """zeusd answered with an error status (``status``), or could not be reached (None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ZeusdUnreachableError(ZeusdError):
    """Nothing answers at the daemon's socket or address (not started, gone, restarting), or
    it did not answer before the deadline (``stalled``)."""

    def __init__(self, message: str, *, stalled: bool = False) -> None:
        super().__init__(message)
        self.stalled = stalled


class ZeusdConfigError(ZeusdError):
    """The daemon cannot be used as configured: a malformed variable, a socket this process
    may not open, or something that is not zeusd at that address. The message names the
    variable to fix; nothing was changed on any GPU."""


@dataclass(frozen=True)
class ZeusdEndpoint:
    """Where zeusd listens: a Unix socket or ``host:port``, the token to send, and the
    deadline of one request in s (a blocking set gets :data:`CONTROL_TIMEOUT_FACTOR` times
    it)."""

    socket_path: str | None = None
    host_port: str | None = None
    token: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if (self.socket_path is None) == (self.host_port is None):
            raise ZeusdConfigError(
                "a zeusd endpoint is invalid: expected exactly one of "
                f"socket_path ({SOCK_PATH_ENV}) or host_port ({HOST_PORT_ENV})"
            )
        if self.host_port is not None:
            split_host_port(self.host_port)
        if self.token is not None:
            _check_token(self.token)
        _check_timeout(self.timeout_s)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ZeusdEndpoint | None:
        """``ZEUSD_SOCK_PATH`` first, then ``ZEUSD_HOST_PORT``, as upstream Zeus reads them;
        None when neither is set (or both are empty). A malformed value is a
        ZeusdConfigError naming its variable."""
        token = env.get(TOKEN_ENV) or None
        timeout_s = _timeout_from(env.get(TIMEOUT_ENV))
        if env.get(SOCK_PATH_ENV):
            return cls(socket_path=env[SOCK_PATH_ENV], token=token, timeout_s=timeout_s)
        if env.get(HOST_PORT_ENV):
            return cls(host_port=env[HOST_PORT_ENV], token=token, timeout_s=timeout_s)
        return None

    @property
    def where(self) -> str:
        """E.g. ``zeusd at /run/zeusd/zeusd.sock``."""
        return f"zeusd at {self.socket_path or self.host_port}"

    @property
    def variable(self) -> str:
        """The environment variable that names this endpoint."""
        return SOCK_PATH_ENV if self.socket_path is not None else HOST_PORT_ENV


class ZeusdClient:
    """JSON over HTTP/1.1 to one daemon; a connection per request, so a daemon that restarts
    between two calls is simply reached again."""

    def __init__(self, endpoint: ZeusdEndpoint) -> None:
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._stalled_s: dict[int, float] = {}
        self._quiet_until_s = 0.0
        self._last_stall: str | None = None

    def get(self, path: str, **params: object) -> Any:
        return self._request("GET", path, params, self.endpoint.timeout_s)

    def post(self, path: str, **params: object) -> Any:
        """A set gets longer than a read to wait for the driver, but no more than a read
        while the daemon is known to stall (then it is tried anyway: it may be a limit
        being put back)."""
        with self._lock:
            quiet = self._quiet_until_s > time.monotonic()
        factor = 1.0 if quiet else CONTROL_TIMEOUT_FACTOR
        return self._request("POST", path, params, self.endpoint.timeout_s * factor)

    def stalled_s(self, thread: int | None = None) -> float:
        """Seconds ``thread`` (default: this one) has spent in requests the daemon never
        answered in time."""
        with self._lock:
            return self._stalled_s.get(threading.get_ident() if thread is None else thread, 0.0)

    def _request(
        self, method: str, path: str, params: Mapping[str, object], timeout_s: float
    ) -> Any:
        self._refuse_while_quiet(method, path)
        query = urlencode({k: _param(v) for k, v in params.items()})
        target = f"{path}?{query}" if query else path
        headers = {"Authorization": f"Bearer {self.endpoint.token}"} if self.endpoint.token else {}
        started_s = time.monotonic()
        connection = _connection(self.endpoint, started_s + timeout_s)
        try:
            connection.request(method, target, headers=headers)
            response = connection.getresponse()
            status, body = response.status, response.read()
            kind = response.getheader("Content-Type", "")
        except TimeoutError as err:
            raise self._stalled(method, path, started_s, timeout_s) from err
        except OSError as err:  # refused, no such socket, reset, no permission
            raise _unreachable(self.endpoint, method, path, err) from err
        except http.client.HTTPException as err:  # a status line or header that is not HTTP
            raise _not_zeusd(self.endpoint, method, path, repr(err)) from err
        finally:
            connection.close()
        return _answer(self.endpoint, method, path, status, body, kind)

    def _refuse_while_quiet(self, method: str, path: str) -> None:
        """After a stall, reads are refused at once for a while; a set (putting a limit back,
        say) is always tried: it matters more than the seconds it may cost."""
        if method != "GET":
            return
        with self._lock:
            quiet_s = self._quiet_until_s - time.monotonic()
            if quiet_s > 0:
                raise ZeusdUnreachableError(
                    f"{self.endpoint.where} was not asked ({method} {path}): "
                    f"{self._last_stall}; asked again in {quiet_s:.0f} s",
                    stalled=False,
                )

    def _stalled(
        self, method: str, path: str, started_s: float, timeout_s: float
    ) -> ZeusdUnreachableError:
        now_s = time.monotonic()
        with self._lock:
            ident = threading.get_ident()
            self._stalled_s[ident] = self._stalled_s.get(ident, 0.0) + (now_s - started_s)
            self._quiet_until_s = now_s + RETRY_AFTER_S
            self._last_stall = (
                f"it did not answer {method} {path} within {timeout_s:g} s "
                f"({TIMEOUT_ENV}); it is hanging or overloaded"
            )
            return ZeusdUnreachableError(f"{self.endpoint.where}: {self._last_stall}", stalled=True)


def _connection(endpoint: ZeusdEndpoint, deadline_s: float) -> http.client.HTTPConnection:
    if endpoint.socket_path is not None:
        return _DeadlineConnection(("unix", endpoint.socket_path), deadline_s)
    assert endpoint.host_port is not None
    return _DeadlineConnection(split_host_port(endpoint.host_port), deadline_s)


class _DeadlineSocket(socket.socket):
    """A socket whose every send and receive waits at most until ``deadline_s`` (monotonic):
    http.client's timeout is per operation, so a daemon trickling one byte a second would
    otherwise hold a request for as long as it likes."""

    deadline_s = 0.0

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._before_deadline()
        return super().recv_into(buffer, nbytes, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._before_deadline()
        super().sendall(data, flags)

    def _before_deadline(self) -> None:
        left_s = self.deadline_s - time.monotonic()
        if left_s <= 0:
            raise TimeoutError("zeusd's deadline passed")
        self.settimeout(left_s)


class _DeadlineConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (``("unix", path)``) or TCP (``(host, port)``), every byte
    before ``deadline_s``; the host name only fills the Host header for a socket."""

    def __init__(self, address: tuple[str, str | int], deadline_s: float) -> None:
        family_host, where = address
        host = "localhost" if family_host == "unix" else family_host
        port = None if family_host == "unix" else int(where)
        super().__init__(host, port, timeout=max(deadline_s - time.monotonic(), 0.001))
        self._address = address
        self._deadline_s = deadline_s

    def connect(self) -> None:
        kind, where = self._address
        if kind == "unix":
            self.sock = self._open(socket.AF_UNIX, str(where))
            return
        last: OSError | None = None
        for family, _, _, _, address in socket.getaddrinfo(kind, where, type=socket.SOCK_STREAM):
            try:
                self.sock = self._open(family, address)
                return
            except TimeoutError:
                raise
            except OSError as err:
                last = err
        raise last or OSError(f"no address for {kind}")

    def _open(self, family: int, address: Any) -> _DeadlineSocket:
        sock = _DeadlineSocket(family, socket.SOCK_STREAM)
        sock.deadline_s = self._deadline_s
        try:
            sock._before_deadline()
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        return sock


def _answer(
    endpoint: ZeusdEndpoint, method: str, path: str, status: int, body: bytes, kind: str
) -> Any:
    if status != 200:
        raise ZeusdError(
            f"{endpoint.where} answered {status} to {method} {path} "
            f"({_STATUS_MEANING.get(status, 'unexpected status')}): {_text(body)}",
            status,
        )
    if not body.strip():
        return None
    if "json" not in kind:
        raise _not_zeusd(endpoint, method, path, f"{kind or 'no content type'}: {_text(body)}")
    try:
        return json.loads(body)
    except ValueError as err:
        raise _not_zeusd(endpoint, method, path, f"not JSON: {_text(body)}") from err


def _unreachable(endpoint: ZeusdEndpoint, method: str, path: str, err: OSError) -> ZeusdError:
    if isinstance(err, PermissionError):
        return ZeusdConfigError(
            f"{endpoint.variable}={endpoint.socket_path or endpoint.host_port!r}: this process "
            f"(uid {os.getuid()}, groups {sorted({os.getgid(), *os.getgroups()})}) may not "
            f"connect to the socket ({err.strerror}); start zeusd with --socket-permissions "
            "and --socket-gid that admit it (the pod's runAsGroup, 0 for the Airflow image)"
        )
    if isinstance(err, socket.gaierror):
        return ZeusdConfigError(
            f"{HOST_PORT_ENV}={endpoint.host_port!r}: its host name does not resolve "
            f"({err.strerror}); expected host:port of the node's zeusd (e.g. node1:4938)"
        )
    hint = (
        "is the daemon running and its socket shared with this container?"
        if endpoint.socket_path is not None
        else "is the daemon running in TCP mode (zeusd serve --mode tcp) at that address?"
    )
    return ZeusdUnreachableError(
        f"{endpoint.where} cannot be reached ({method} {path}: {err}); {hint}"
    )


def _not_zeusd(endpoint: ZeusdEndpoint, method: str, path: str, what: str) -> ZeusdConfigError:
    return ZeusdConfigError(
        f"{endpoint.variable}={endpoint.socket_path or endpoint.host_port!r} does not answer "
        f"as zeusd does ({method} {path}: {what}); point it at the node's zeusd"
    )


def _param(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def split_host_port(text: str) -> tuple[str, int]:
    """``host:port`` (IPv6 in brackets) -> (host, port); a ZeusdConfigError naming
    ``ZEUSD_HOST_PORT`` for anything else (a scheme, a path, a port out of range)."""
    host, _, port = text.strip().rpartition(":")
    problem = None
    if "://" in text or "/" in text:
        problem = "no scheme or path (zeusd takes host:port, not a URL)"
    elif not host or not port.isascii() or not port.isdigit():
        problem = "host:port"
    elif not 0 < int(port) < 65536:
        problem = "a port in 1..65535"
    if problem is not None:
        raise ZeusdConfigError(
            f"{HOST_PORT_ENV}={text!r} is invalid: expected {problem} "
            "(e.g. node1:4938, as zeusd serve --mode tcp --tcp-bind-address takes it)"
        )
    return host.strip("[]"), int(port)


def _check_token(token: str) -> None:
    bad = [c for c in token if not (c.isascii() and c.isprintable()) or c.isspace()]
    if bad or not token:
        raise ZeusdConfigError(
            f"{TOKEN_ENV} is invalid: it contains {_describe(bad)}; a token is one line "
            "of printable ASCII, as `zeusd token issue` prints it (strip the newline a "
            "Secret file or `echo` adds)"
        )


def _describe(chars: list[str]) -> str:
    if not chars:
        return "nothing"
    names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}
    return names.get(chars[0], f"the character {chars[0]!r}")


def _timeout_from(text: str | None) -> float:
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT_S
    try:
        return float(text)
    except ValueError:
        raise ZeusdConfigError(f"{TIMEOUT_ENV}={text!r} is invalid: {_TIMEOUT_RANGE}") from None


_TIMEOUT_RANGE = f"expected a number of seconds in [{MIN_TIMEOUT_S:g}, {MAX_TIMEOUT_S:g}]"


def _check_timeout(timeout_s: object) -> None:
    """Refuse a deadline by its value: one below the floor would make every answer a
    "hanging" daemon, one that is not finite or too long would hold the task."""
    if not (isinstance(timeout_s, int | float) and MIN_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S):
        floor = (
            f"below {MIN_TIMEOUT_S:g} s even a healthy zeusd cannot answer in time; "
            if isinstance(timeout_s, int | float) and 0 < timeout_s < MIN_TIMEOUT_S
            else ""
        )
        raise ZeusdConfigError(f"{TIMEOUT_ENV}={timeout_s!r} is invalid: {floor}{_TIMEOUT_RANGE}")


def _text(body: bytes, limit: int = 300) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else f"{text[:limit]}..."
