"""A small client of zeusd's HTTP API (ml-energy/zeus, docs/zeusd/api.md), standard library only.

zeusd is the privileged daemon of upstream Zeus: it sets GPU power limits (NVML or AMD SMI) and
reads GPU and CPU (RAPL) energy for unprivileged processes, over a Unix socket or TCP. A process
finds it through ``ZEUSD_SOCK_PATH`` (a socket path) or ``ZEUSD_HOST_PORT`` (``host:port``),
and sends ``ZEUSD_TOKEN`` as a bearer token when the daemon requires one.

Why our own client and not ``zeus.utils.zeusd.ZeusdClient`` (docs/devices.md, "zeusd"): the
upstream one comes with the ``zeus`` package and httpx, which the base install would then carry
on every scheduler and api-server; the dozen calls we need fit in ``http.client``.

Every answer other than 200 is a :class:`ZeusdError` carrying the HTTP status, and a daemon
that cannot be reached is a :class:`ZeusdUnreachableError`; the messages name the daemon and
what to check.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from zeus_airflow.core.devices.base import DeviceError

SOCK_PATH_ENV = "ZEUSD_SOCK_PATH"
HOST_PORT_ENV = "ZEUSD_HOST_PORT"
TOKEN_ENV = "ZEUSD_TOKEN"
DEFAULT_TIMEOUT_S = 10.0
"""A blocking set waits for the driver; reads answer in microseconds."""

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
    """Nothing answers at the daemon's socket or address (not started, gone, restarting)."""


@dataclass(frozen=True)
class ZeusdEndpoint:
    """Where zeusd listens: a Unix socket or ``host:port``, and the token to send."""

    socket_path: str | None = None
    host_port: str | None = None
    token: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if (self.socket_path is None) == (self.host_port is None):
            raise DeviceError(
                "a zeusd endpoint is invalid: expected exactly one of "
                f"socket_path ({SOCK_PATH_ENV}) or host_port ({HOST_PORT_ENV})"
            )
        if self.host_port is not None:
            _split_host_port(self.host_port)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ZeusdEndpoint | None:
        """``ZEUSD_SOCK_PATH`` first, then ``ZEUSD_HOST_PORT``, as upstream Zeus reads them;
        None when neither is set (or both are empty)."""
        token = env.get(TOKEN_ENV) or None
        if env.get(SOCK_PATH_ENV):
            return cls(socket_path=env[SOCK_PATH_ENV], token=token)
        if env.get(HOST_PORT_ENV):
            return cls(host_port=env[HOST_PORT_ENV], token=token)
        return None

    @property
    def where(self) -> str:
        """E.g. ``zeusd at /run/zeusd/zeusd.sock``."""
        return f"zeusd at {self.socket_path or self.host_port}"


class ZeusdClient:
    """JSON over HTTP/1.1 to one daemon; a connection per request, so a daemon that restarts
    between two calls is simply reached again."""

    def __init__(self, endpoint: ZeusdEndpoint) -> None:
        self.endpoint = endpoint

    def get(self, path: str, **params: object) -> Any:
        return self._request("GET", path, params)

    def post(self, path: str, **params: object) -> Any:
        return self._request("POST", path, params)

    def _request(self, method: str, path: str, params: Mapping[str, object]) -> Any:
        query = urlencode({k: _param(v) for k, v in params.items()})
        target = f"{path}?{query}" if query else path
        headers = {"Authorization": f"Bearer {self.endpoint.token}"} if self.endpoint.token else {}
        connection = self._connection()
        try:
            connection.request(method, target, headers=headers)
            response = connection.getresponse()
            status, body = response.status, response.read()
        except OSError as err:  # refused, no such socket, reset, timed out
            raise ZeusdUnreachableError(
                f"{self.endpoint.where} cannot be reached ({method} {path}: {err}); is the "
                "daemon running and its socket shared with this container?"
            ) from err
        finally:
            connection.close()
        if status != 200:
            raise ZeusdError(
                f"{self.endpoint.where} answered {status} to {method} {path} "
                f"({_STATUS_MEANING.get(status, 'unexpected status')}): "
                f"{_text(body)}",
                status,
            )
        return json.loads(body) if body.strip() else None

    def _connection(self) -> http.client.HTTPConnection:
        endpoint = self.endpoint
        if endpoint.socket_path is not None:
            return _UnixConnection(endpoint.socket_path, endpoint.timeout_s)
        assert endpoint.host_port is not None
        host, port = _split_host_port(endpoint.host_port)
        return http.client.HTTPConnection(host, port, timeout=endpoint.timeout_s)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: the host name only fills the Host header."""

    def __init__(self, socket_path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _param(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _split_host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise DeviceError(
            f"{HOST_PORT_ENV}={text!r} is invalid: expected host:port (e.g. node1:4938)"
        )
    return host.strip("[]"), int(port)


def _text(body: bytes, limit: int = 300) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else f"{text[:limit]}..."
