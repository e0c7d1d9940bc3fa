"""The zeusd client's own faults and the user's mistakes, each a clear error naming what to fix:
a URL or an out-of-range port in ZEUSD_HOST_PORT, a newline in ZEUSD_TOKEN, a socket this user
may not open, a server that is not zeusd (garbage, HTML), and a daemon that accepts and never
answers or trickles (each request bounded by its deadline, stalls counted, the daemon left
alone afterwards)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zeus_airflow.core.devices.zeusd_client import (
    ZeusdClient,
    ZeusdConfigError,
    ZeusdEndpoint,
    ZeusdError,
    ZeusdUnreachableError,
)
from zeus_airflow.testing import FakeNVML, FakeZeusd


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ZEUSD_HOST_PORT": "http://127.0.0.1:4938"},
            r"ZEUSD_HOST_PORT='http://127.0.0.1:4938' is invalid: expected no scheme or path",
        ),
        (
            {"ZEUSD_HOST_PORT": "127.0.0.1:99999"},
            r"ZEUSD_HOST_PORT='127.0.0.1:99999' is invalid: expected a port in 1..65535",
        ),
        ({"ZEUSD_HOST_PORT": "node1"}, r"ZEUSD_HOST_PORT='node1' is invalid: expected host:port"),
        (
            {"ZEUSD_SOCK_PATH": "/run/zeusd/zeusd.sock", "ZEUSD_TOKEN": "abc.def\n"},
            r"ZEUSD_TOKEN is invalid: it contains a newline",
        ),
        (
            {"ZEUSD_SOCK_PATH": "/run/zeusd/zeusd.sock", "ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S": "soon"},
            r"ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S='soon' is invalid: expected a number of seconds",
        ),
        (
            {"ZEUSD_SOCK_PATH": "/x.sock", "ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S": "0"},
            r"ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S=0.0 is invalid",
        ),
        (  # issue 48: a nanosecond deadline used to blame the daemon ("hanging or overloaded")
            {"ZEUSD_SOCK_PATH": "/x.sock", "ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S": "1e-9"},
            r"ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S=1e-09 is invalid: below 0.05 s even a healthy zeusd "
            r"cannot answer in time; expected a number of seconds in \[0.05, 600\]",
        ),
    ],
    ids=[
        "url",
        "port_out_of_range",
        "no_port",
        "token_newline",
        "timeout_word",
        "timeout_zero",
        "timeout_below_floor",
    ],
)
def test_each_malformed_variable_is_refused_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(ZeusdConfigError, match=message):
        ZeusdEndpoint.from_env(env)


def test_a_good_environment_is_read_as_upstream_reads_it() -> None:
    endpoint = ZeusdEndpoint.from_env(
        {
            "ZEUSD_HOST_PORT": "[::1]:4938",
            "ZEUSD_TOKEN": "t0k",
            "ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S": "1.5",
        }
    )
    assert endpoint == ZeusdEndpoint(host_port="[::1]:4938", token="t0k", timeout_s=1.5)
    assert ZeusdEndpoint.from_env({"ZEUSD_SOCK_PATH": "", "ZEUSD_HOST_PORT": ""}) is None


@pytest.fixture
def raw_server(tmp_path: Path) -> Iterator[tuple[socket.socket, list[bytes]]]:
    """A TCP server on 127.0.0.1 answering each connection with the next of ``replies``
    (set by the test); a reply of None accepts and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    replies: list[bytes] = []
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(65536)
            reply = replies.pop(0) if replies else b""
            if reply == b"HOLD":
                held.append(conn)
                continue
            if reply.startswith(b"TRICKLE"):
                threading.Thread(target=_trickle, args=(conn,), daemon=True).start()
                continue
            conn.sendall(reply)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server, replies
    server.close()
    for conn in held:
        conn.close()


def _trickle(conn: socket.socket) -> None:
    try:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}":
            conn.sendall(bytes([byte]))
            time.sleep(0.2)
    except OSError:
        pass
    finally:
        conn.close()


def client_of(server: socket.socket, timeout_s: float = 1.0) -> ZeusdClient:
    host, port = server.getsockname()
    return ZeusdClient(ZeusdEndpoint(host_port=f"{host}:{port}", timeout_s=timeout_s))


@pytest.mark.parametrize(
    ("reply", "seen"),
    [
        (b"garbage\r\n\r\n", "BadStatusLine"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 15\r\n\r\n"
            b"<html>hi</html>",
            "text/html: <html>hi</html>",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{nope",
            "not JSON: {nope",
        ),
    ],
    ids=["garbage", "html", "broken_json"],
)
def test_a_server_that_is_not_zeusd_is_said_so_naming_the_variable(
    raw_server: tuple[socket.socket, list[bytes]], reply: bytes, seen: str
) -> None:
    server, replies = raw_server
    replies.append(reply)
    with pytest.raises(
        ZeusdConfigError, match=r"ZEUSD_HOST_PORT='127.0.0.1:\d+' does not answer"
    ) as e:
        client_of(server).get("/discover")
    assert seen in str(e.value) and "point it at the node's zeusd" in str(e.value)


def test_a_closed_port_is_unreachable_not_a_config_error() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    client = ZeusdClient(ZeusdEndpoint(host_port=f"127.0.0.1:{port}"))
    with pytest.raises(ZeusdUnreachableError, match="zeusd serve --mode tcp") as e:
        client.get("/discover")
    assert not e.value.stalled


@pytest.mark.parametrize("reply", [b"HOLD", b"TRICKLE"], ids=["silent", "trickling"])
def test_a_hanging_daemon_costs_one_deadline_then_is_left_alone(
    raw_server: tuple[socket.socket, list[bytes]], reply: bytes
) -> None:
    server, replies = raw_server
    replies.append(reply)
    client = client_of(server, timeout_s=0.5)
    started_s = time.monotonic()
    with pytest.raises(
        ZeusdUnreachableError, match=r"did not answer GET /discover within 0.5 s"
    ) as e:
        client.get("/discover")
    took_s = time.monotonic() - started_s
    assert e.value.stalled and 0.45 < took_s < 1.5  # the deadline, not the trickle's 8 s
    assert client.stalled_s() == pytest.approx(took_s, abs=0.05)
    assert client.stalled_s(threading.get_ident() + 1) == 0.0  # another thread's: none
    # Asked again at once: refused without a connection, so it costs nothing more.
    started_s = time.monotonic()
    with pytest.raises(ZeusdUnreachableError, match="asked again in 30 s") as again:
        client.get("/gpu/get_power")
    assert time.monotonic() - started_s < 0.05 and not again.value.stalled


def test_a_socket_this_user_may_not_open_names_the_socket_options(tmp_path: Path) -> None:
    """In a child forked as another user: the tests run as root (as CI does), which any
    socket admits."""
    tmp_path.chmod(0o755)
    with FakeZeusd(tmp_path / "zeusd.sock", FakeNVML(1)) as daemon:
        assert daemon.socket_path is not None
        daemon.socket_path.chmod(0o660)  # zeusd's --socket-permissions 660, root's group
        endpoint = ZeusdEndpoint(socket_path=str(daemon.socket_path))
        said = _as_nobody(lambda: ZeusdClient(endpoint).get("/discover"))
    assert said.startswith("ZeusdConfigError: ZEUSD_SOCK_PATH="), said
    assert "uid 65534" in said and "--socket-permissions and --socket-gid" in said


def _as_nobody(call: Callable[[], object]) -> str:
    """What ``call`` raised (``Type: message``), run in a child as uid and gid 65534."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            call()
            said = "nothing raised"
        except BaseException as err:
            said = f"{type(err).__name__}: {err}"
        os.write(write_end, said.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return said


def test_an_error_status_keeps_zeusds_own_words(tmp_path: Path) -> None:
    with FakeZeusd(tmp_path / "z.sock", FakeNVML(1)) as daemon:
        client = ZeusdClient(ZeusdEndpoint(socket_path=str(daemon.socket_path)))
        with pytest.raises(ZeusdError, match=r"answered 400 .* missing field `block`") as e:
            client.post("/gpu/set_power_limit", gpu_ids=[0], power_limit_mw=150_000)
        assert e.value.status == 400
