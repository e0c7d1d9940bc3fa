"""zeusd as it ships (the 0.5.0 release) and as upstream has it since (``head``), over a Unix
socket and over TCP (ZEUSD_HOST_PORT), against the strict fake zeusd:

- each 400 zeusd gives is given by the double, and the client passes zeusd's words on;
- a whole run sets and restores a limit in both modes and both transports;
- zeusd 0.5.0's /discover has no PCI addresses: the task's GPUs are found another way
  (NVIDIA_VISIBLE_DEVICES, the node's GPU table, NVML seeing the node's GPUs, one GPU), an
  explicit ``zeusd:<i>`` always works, counters are probed, and what it offers is said;
- on a MIG instance no limit is ever set through zeusd;
- a daemon that hangs mid-run costs seconds, and the stall is kept out of the try;
- a daemon that cannot be reached when the task starts: the task measures only and succeeds.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_zeusd_device import job, steps_train

from zeus_airflow.core.devices import nvml
from zeus_airflow.core.devices.base import DeviceError, PowerLimitUnavailableError
from zeus_airflow.core.devices.guarded import GuardedGPUs
from zeus_airflow.core.devices.spec import open_device, parse_device
from zeus_airflow.core.devices.zeusd import ZeusdGPUs
from zeus_airflow.core.devices.zeusd_client import (
    ZeusdClient,
    ZeusdConfigError,
    ZeusdEndpoint,
    ZeusdError,
)
from zeus_airflow.core.devices.zeusd_discovery import LocalGPUs
from zeus_airflow.core.store.base import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import A100_SXM4, FakeNVML, ManualClock
from zeus_airflow.testing.fake_zeusd import APIS, FakeZeusd

A100 = replace(A100_SXM4, default_limit_mw=400_000)  # draws 360 W at 400 W
LOG = logging.getLogger("zeus_airflow")
NO_GPU_SEEN = LocalGPUs()  # a process that can tell nothing of its GPUs (no NVML here)


@pytest.fixture(
    params=[(api, transport) for api in APIS for transport in ("unix", "tcp")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def daemon(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FakeZeusd]:
    api, transport = request.param
    clock = ManualClock()
    where = None if transport == "tcp" else tmp_path / "zeusd.sock"
    with FakeZeusd(where, FakeNVML(2, A100, clock=clock), api=api, tcp=transport == "tcp") as d:
        yield d


def endpoint_of(daemon: FakeZeusd, **kw: Any) -> ZeusdEndpoint:
    return ZeusdEndpoint.from_env({**daemon.env(), **kw}) or pytest.fail("no endpoint")


@pytest.fixture
def store(tmp_path: Path) -> SQLStore:
    return SQLStore(f"sqlite:///{tmp_path}/zeus.db", create_schema=True)


# --- each 400 as zeusd answers it -----------------------------------------------------------
BAD_REQUESTS = [
    # (method, path, query, what zeusd says)
    (
        "POST",
        "/gpu/set_power_limit",
        {"gpu_ids": "0", "power_limit_mw": "150000"},
        "Query deserialize error: missing field `block`",
    ),
    (
        "GET",
        "/gpu/get_power_limit",
        {"gpu_id": "0"},
        "Query deserialize error: unknown field `gpu_id`, expected one of `gpu_ids`",
    ),
    (
        "POST",
        "/gpu/set_power_limit",
        {"gpu_ids": "0", "power_limit_mw": "150000", "block": "true", "force": "true"},
        "unknown field `force`, expected one of `gpu_ids`, `power_limit_mw`, `block`",
    ),
    (
        "GET",
        "/gpu/get_cumulative_energy",
        {"gpu_ids": ""},
        '{"error": "gpu_ids must contain at least one GPU index"}',
    ),
    (
        "POST",
        "/gpu/set_power_limit",
        {"gpu_ids": "", "power_limit_mw": "150000", "block": "true"},
        '{"error": "gpu_ids must contain at least one GPU index"}',
    ),
    (
        "POST",
        "/gpu/set_power_limit",
        {"gpu_ids": "0", "power_limit_mw": "150000", "block": "maybe"},
        "Query deserialize error: provided string was not `true` or `false`",
    ),
    ("GET", "/cpu/get_cumulative_energy", {}, "Query deserialize error: missing field `cpu`"),
    (
        "GET",
        "/cpu/get_cumulative_energy",
        {"cpu": "true"},
        "Query deserialize error: missing field `dram`",
    ),
    (
        "POST",
        "/gpu/set_power_limit",
        {"gpu_ids": "0", "power_limit_mw": "300.5", "block": "true"},
        "Query deserialize error: invalid digit found in string",
    ),
    (
        "POST",
        "/gpu/set_power_limit",
        {"gpu_ids": "7", "power_limit_mw": "150000", "block": "true"},
        "GPU index 7 does not exist.",
    ),
    ("GET", "/gpu/get_power_limit", {"gpu_ids": "0,7"}, '{"error": "GPU 7 not found"}'),
    ("GET", "/gpu/get_power", {"gpu_ids": "0,x"}, '{"error": "Invalid GPU index: x"}'),
    (
        "POST",
        "/gpu/set_power_limit",
        {"gpu_ids": "0", "power_limit_mw": "50000", "block": "true"},
        '{"errors": {"0": "NVML error: Invalid Argument"}}',  # the driver's, passed through
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "query", "said"),
    BAD_REQUESTS,
    ids=[
        "set_without_block",
        "unknown_parameter",
        "unknown_parameter_on_a_set",
        "empty_gpu_ids_read",
        "empty_gpu_ids_set",
        "block_maybe",
        "cpu_without_cpu_and_dram",
        "cpu_without_dram",
        "power_limit_mw_300.5",
        "unknown_gpu_set",
        "unknown_gpu_read",
        "bad_gpu_index",
        "limit_out_of_range",
    ],
)
def test_each_400_is_answered_as_zeusd_answers_it(
    daemon: FakeZeusd, method: str, path: str, query: dict[str, str], said: str
) -> None:
    """``limit_out_of_range`` follows upstream's ``zeusd/src/error.rs`` (alike in its last
    stored version before 0.5.0 and at commit 026056e after it): NVML's ``InvalidArg`` is 400,
    and a blocking set's per-GPU errors come back as
    ``{"errors": {"<id>": "NVML error: ..."}}`` at the worst one's status."""
    client = ZeusdClient(endpoint_of(daemon))
    call = client.post if method == "POST" else client.get
    with pytest.raises(ZeusdError) as caught:
        call(path, **query)
    assert caught.value.status == 400 and said in str(caught.value), str(caught.value)
    assert daemon.answers[-1] == (path, 400)  # answered, not a dropped connection
    assert daemon.nvml.limits_mw() == [400_000, 400_000]  # nothing changed


def test_the_rest_of_zeusds_statuses(tmp_path: Path) -> None:
    """Follows upstream's ``zeusd/src/auth.rs`` (alike in 0.3.0, commit bd12420, and after
    0.5.0, commit 026056e): a path of a group not served is 404 before any token check, a token
    that does not decode 401, ``/auth/*`` without a signing key 404; a wrong method is actix's
    404 (actix/actix-web#2735), and a non-blocking set is 200 once sent (``routes/gpu.rs``)."""
    with FakeZeusd(
        tmp_path / "z.sock", FakeNVML(1, A100), tokens={"r": ["gpu-read"]}, groups=["gpu-read"]
    ) as d:
        endpoint = ZeusdEndpoint(socket_path=str(d.socket_path), token="r")
        client = ZeusdClient(endpoint)
        statuses = []
        for call, path, query in [
            (client.post, "/gpu/set_power_limit", {"gpu_ids": 0, "power_limit_mw": 1, "block": 1}),
            (client.get, "/cpu/get_cumulative_energy", {"cpu": True, "dram": True}),
            (client.post, "/gpu/get_power_limit", {}),
            (ZeusdClient(replace(endpoint, token="forged")).get, "/gpu/get_power", {}),
        ]:
            with pytest.raises(ZeusdError) as caught:
                call(path, **query)
            statuses.append(caught.value.status)
        # group not served (gpu-control, cpu-read), wrong method (actix: no route), unknown
        # token: as zeusd answers (issue 49)
        assert statuses == [404, 404, 404, 401]
        assert client.get("/auth/whoami")["scopes"] == ["gpu-read"]
        # A non-blocking set is dispatched: 200 at once, the driver's refusal dropped.
    with FakeZeusd(tmp_path / "z.sock", FakeNVML(1, A100)) as d:
        client = ZeusdClient(ZeusdEndpoint(socket_path=str(d.socket_path)))
        assert (
            client.post("/gpu/set_power_limit", gpu_ids=[0], power_limit_mw=1, block=False) is None
        )
        assert d.nvml.limits_mw() == [400_000] and d.answers[-1] == ("/gpu/set_power_limit", 200)
        with pytest.raises(ZeusdError, match="answered 404"):
            client.get("/auth/whoami")  # a daemon without auth


def test_discover_says_what_each_release_says(daemon: FakeZeusd) -> None:
    found = ZeusdClient(endpoint_of(daemon)).get("/discover")
    keys = {"id", "name"} | (
        {"pci_address", "cumulative_energy_available"} if daemon.state.api == "head" else set()
    )
    assert [set(g) for g in found["gpus"]] == [keys, keys]
    assert set(found) == {"gpus", "cpus", "enabled_api_groups", "auth_required"}


# --- a whole run, both releases, both transports -------------------------------------------
def test_a_whole_run_sets_and_restores_a_limit(daemon: FakeZeusd, store: SQLStore) -> None:
    daemon.nvml.nvmlDeviceSetPowerManagementLimit(
        daemon.nvml.nvmlDeviceGetHandleByIndex(1), 325_500
    )
    clock = daemon.nvml.clock
    assert isinstance(clock, ManualClock)
    gpus = ZeusdGPUs(
        local=LocalGPUs(visible_devices="1"),  # the container was given the host's GPU 1
        endpoint=endpoint_of(daemon),
        clock=clock,
    )
    assert gpus.indices == (1,) and gpus.energy_source == "counter"
    head = daemon.state.api == "head"
    assert gpus.uuids == (("pci:0000:12:00.0",) if head else ("zeusd-gpu:1",))
    leases = GPULeases(store)
    with PowerLimitGuard(gpus, leases, LOG) as guard:
        before_mj = daemon.nvml.true_energy_mj(1)
        result = Engine(store, guard.gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
            steps_train(clock), RecurrenceKey("r1")
        )
        drawn_j = (daemon.nvml.true_energy_mj(1) - before_mj) / 1000
        assert len(leases.on_host()) == 1
    assert result.reached_target and result.final.outcome.power_control == "zeusd"
    limits_set = [mw for _, mw in daemon.set_limit_calls()]
    assert {i for i, _ in daemon.set_limit_calls()} == {1}
    assert len(set(limits_set)) >= 3 and limits_set[-1] == 325_500  # walked, then put back
    assert daemon.nvml.limits_mw() == [400_000, 325_500] and leases.on_host() == []
    assert result.energy_j == pytest.approx(drawn_j, rel=1e-3)  # GPU 1's, measured


# --- zeusd 0.5.0: finding the task's GPUs without PCI addresses ----------------------------
@pytest.fixture
def release_050(tmp_path: Path) -> Iterator[FakeZeusd]:
    """zeusd 0.5.0 on a node of four GPUs, its socket in a folder of its own."""
    (tmp_path / "run").mkdir()
    with FakeZeusd(tmp_path / "run" / "zeusd.sock", FakeNVML(4, A100), api="0.5.0") as d:
        yield d


def table_text(fake: FakeNVML) -> str:
    return "".join(f"{i}, {fake.gpu_uuids()[i]}, 00000000:{0x11 + i:02X}:00.0\n" for i in range(4))


@pytest.mark.parametrize(
    ("local", "ids", "how"),
    [
        (
            LocalGPUs(visible_devices="2,3"),
            (2, 3),
            "NVIDIA_VISIBLE_DEVICES=2,3: the host's indices",
        ),
        (LocalGPUs(nvml_count=4, cuda_indices=(3,)), (3,), "NVML here sees the node's 4 GPUs"),
    ],
    ids=["visible_devices_indices", "process_sees_the_node"],
)
def test_050_maps_gpus_without_pci_addresses(
    release_050: FakeZeusd, local: LocalGPUs, ids: tuple[int, ...], how: str
) -> None:
    gpus = ZeusdGPUs(local=local, endpoint=endpoint_of(release_050))
    assert gpus.indices == ids and how in gpus.choice.how
    assert gpus.uuids == tuple(f"zeusd-gpu:{i}" for i in ids)


def test_050_maps_a_pods_gpu_uuid_through_the_nodes_gpu_table(release_050: FakeZeusd) -> None:
    """The device plugin's default: NVIDIA_VISIBLE_DEVICES=GPU-<uuid>; the zeusd image wrote
    the node's table beside the socket (docker/zeusd/entrypoint.sh)."""
    fake = release_050.nvml
    assert release_050.socket_path is not None
    (release_050.socket_path.parent / "gpus.csv").write_text(table_text(fake))
    pod = LocalGPUs(visible_devices=fake.gpu_uuids()[2])
    gpus = ZeusdGPUs(local=pod, endpoint=endpoint_of(release_050))
    assert gpus.indices == (2,) and gpus.uuids == ("pci:0000:13:00.0",)
    # A pod whose NVML shows its GPU: by PCI address through the table.
    by_nvml = ZeusdGPUs(
        local=LocalGPUs(pci=frozenset({"0000:14:00.0"})), endpoint=endpoint_of(release_050)
    )
    assert by_nvml.indices == (3,) and "by PCI address" in by_nvml.choice.how


def test_050_cannot_tell_and_says_what_to_do(release_050: FakeZeusd) -> None:
    with pytest.raises(
        DeviceError,
        match=r"cannot tell which of the 4 GPUs .* has no PCI addresses"
        r".*pass device='zeusd:<ids>', set NVIDIA_VISIBLE_DEVICES .*\(ZEUS_AIRFLOW_ZEUSD_GPUS",
    ):
        ZeusdGPUs(local=NO_GPU_SEEN, endpoint=endpoint_of(release_050))
    # An explicit index needs no mapping at all.
    assert ZeusdGPUs((0,), local=NO_GPU_SEEN, endpoint=endpoint_of(release_050)).indices == (0,)
    with pytest.raises(
        DeviceError,
        match=r"NVIDIA_VISIBLE_DEVICES=9: the host's indices, zeusd's ids gives GPUs \[9\], "
        r"not distinct",
    ):
        ZeusdGPUs(local=LocalGPUs(visible_devices="9"), endpoint=endpoint_of(release_050))


def test_050_a_bad_gpu_table_is_refused_naming_it(
    release_050: FakeZeusd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEUS_AIRFLOW_ZEUSD_GPUS", str(tmp_path / "nowhere.csv"))
    with pytest.raises(ZeusdConfigError, match=r"ZEUS_AIRFLOW_ZEUSD_GPUS='.*nowhere.csv' cannot"):
        ZeusdGPUs(local=NO_GPU_SEEN, endpoint=endpoint_of(release_050))
    (tmp_path / "bad.csv").write_text("0, not-a-uuid, 00000000:11:00.0\n")
    monkeypatch.setenv("ZEUS_AIRFLOW_ZEUSD_GPUS", str(tmp_path / "bad.csv"))
    with pytest.raises(ZeusdConfigError, match=r"bad.csv, line 1 .* is invalid: expected index"):
        ZeusdGPUs(local=NO_GPU_SEEN, endpoint=endpoint_of(release_050))


def test_050_probes_for_counters_and_says_what_it_offers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    fake = FakeNVML(1, replace(A100, energy_counter=False), clock=clock)  # a pre-Volta GPU
    with FakeZeusd(tmp_path / "z.sock", fake, api="0.5.0") as d, caplog.at_level(logging.INFO):
        gpus = ZeusdGPUs(local=NO_GPU_SEEN, endpoint=endpoint_of(d), clock=clock)
        assert gpus.energy_source == "sampling" and gpus.choice.how == "the daemon's only GPU"
        start_j = gpus.energy_j()
        clock.advance(10.0)
        assert gpus.energy_j() - start_j == pytest.approx(3600.0, abs=0.01)
        gpus.close()
    said = caplog.text
    assert "/discover without PCI addresses (zeusd 0.5.0)" in said
    assert "API groups cpu-read, gpu-control, gpu-read; no token required" in said
    assert ("/gpu/get_cumulative_energy", 400) in d.answers  # the probe


# --- MIG -------------------------------------------------------------------------------------
def test_no_limit_is_ever_set_through_zeusd_on_a_mig_instance(
    daemon: FakeZeusd, store: SQLStore
) -> None:
    mig = LocalGPUs(visible_devices="0", mig="MIG instance MIG-6e0f-319c-5000-8000")
    clock = daemon.nvml.clock
    assert isinstance(clock, ManualClock)
    gpus = ZeusdGPUs(local=mig, endpoint=endpoint_of(daemon), clock=clock)
    assert gpus.energy_shared and "never set through zeusd" in (gpus.limits_fixed_because or "")
    with pytest.raises(PowerLimitUnavailableError, match="MIG instance"):
        gpus.set_power_limits_w([150])
    with PowerLimitGuard(gpus, GPULeases(store), LOG) as guard:
        result = Engine(store, guard.gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
            steps_train(clock), RecurrenceKey("r1")
        )
    assert result.reached_target and result.final.outcome.power_control == "none"
    assert daemon.set_limit_calls() == [] and daemon.nvml.limits_mw() == [400_000, 400_000]


def test_a_mig_instance_is_seen_in_the_containers_variables() -> None:
    from zeus_airflow.core.devices.zeusd_discovery import local_gpus

    seen = local_gpus(FakeNVML(1, A100), {"NVIDIA_VISIBLE_DEVICES": "MIG-6e0f-319c"})
    assert seen.mig == "MIG instance MIG-6e0f-319c"
    in_mig_mode = local_gpus(FakeNVML(1, replace(A100, mig_mode=True)), {})
    assert in_mig_mode.mig == "GPUs [0] are in MIG mode"
    assert local_gpus(FakeNVML(1, A100), {}).mig is None


# --- a daemon that hangs mid-run --------------------------------------------------------------
@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize("api", APIS)
def test_a_hang_costs_seconds_and_is_kept_out_of_the_try(
    api: Any, transport: str, tmp_path: Path, store: SQLStore, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNVML(1, A100)  # real time: the stall is real
    where = None if transport == "tcp" else tmp_path / "z.sock"
    with FakeZeusd(where, fake, api=api, tcp=transport == "tcp") as daemon:
        gpus = ZeusdGPUs((0,), endpoint=endpoint_of(daemon, ZEUS_AIRFLOW_ZEUSD_TIMEOUT_S="0.4"))

        def train(run: TrainingRun) -> None:
            for _ in run.epochs():
                for step in run.steps(range(60)):
                    time.sleep(0.005)
                    if step == 30:
                        daemon.hang()  # from here on zeusd accepts and never answers
                run.report_metric(1.0)

        started_s = time.monotonic()
        with caplog.at_level(logging.WARNING), PowerLimitGuard(gpus, GPULeases(store), LOG) as g:
            result = Engine(store, g.gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
                train, RecurrenceKey("r1")
            )
            wall_s = time.monotonic() - started_s
            daemon.release()  # back before the task ends: the lease's restore gets through
    stalled_s = gpus.client.stalled_s()
    assert result.reached_target and wall_s < 6.0  # bounded in seconds
    assert stalled_s >= 0.4  # it did stall, at least one deadline
    assert result.time_s <= wall_s - stalled_s + 0.05  # the stall is not in the try
    assert result.energy_j <= 400.0 * result.time_s  # nor its energy (at most 400 W)
    assert "did not answer" in caplog.text
    assert fake.limits_mw() == [400_000]  # put back once it answered


# --- a daemon that cannot be reached when the task starts -----------------------------------
@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeNVML:
    """The task's own GPU through NVML, read-only as in a pod (no CAP_SYS_ADMIN)."""
    fake = FakeNVML(1, A100, can_set_limits=False)
    monkeypatch.setattr(nvml, "NVMLGPUs", functools.partial(nvml.NVMLGPUs, nvml=fake))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize("device", ["auto", "zeusd:0"])
def test_unreachable_at_start_measures_only(
    transport: str,
    device: str,
    tmp_path: Path,
    store: SQLStore,
    fake_gpu: FakeNVML,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if transport == "unix":
        monkeypatch.setenv("ZEUSD_SOCK_PATH", str(tmp_path / "no-daemon.sock"))
    else:
        with FakeZeusd(None, FakeNVML(1), tcp=True) as gone:
            port = gone.host_port
        monkeypatch.setenv("ZEUSD_HOST_PORT", str(port))  # nothing listens there any more
    with caplog.at_level(logging.WARNING):
        gpus = open_device(parse_device(device))
    assert isinstance(gpus, GuardedGPUs) and gpus.uuids == tuple(fake_gpu.gpu_uuids())
    assert "cannot be reached" in (gpus.limits_fixed_because or "")
    assert "This task measures only, through NVML (read-only)" in caplog.text
    clock = ManualClock()
    with PowerLimitGuard(gpus, GPULeases(store), LOG) as guard:
        result = Engine(store, guard.gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
            steps_train(clock), RecurrenceKey("r1")
        )
    assert result.reached_target and result.final.outcome.power_control == "none"
    assert fake_gpu.set_calls == []  # nothing tried to change a limit


def test_unreachable_with_nothing_to_measure_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEUSD_SOCK_PATH", str(tmp_path / "no-daemon.sock"))  # no NVML here
    with pytest.raises(
        DeviceError,
        match=r"cannot be reached .*\(NVML: cannot initialise NVML"
        r".* AMD SMI: cannot load AMD SMI.* nothing can measure them",
    ):
        open_device(parse_device("auto"))


def test_refusals_come_back_as_zeusd_sends_them(tmp_path: Path) -> None:
    """Issue 49, fix 6: zeusd answers 401 and 403 as JSON ``{"error": ...}``, 401 with a
    ``WWW-Authenticate`` header, and a wrong method with actix's empty 404 (the fake used to
    answer plain text, no header, and 405). Follows upstream's ``zeusd/src/auth.rs`` (alike in
    0.3.0, commit bd12420, and after 0.5.0, commit 026056e: its header names
    ``realm="zeusd"``, its errors the user and the scopes) and ``zeusd/src/routes/gpu.rs``,
    whose handlers are actix route macros, which answer a wrong method 404
    (actix/actix-web#2735)."""
    import http.client
    import json
    import socket as sockets

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = sockets.socket(sockets.AF_UNIX)
            self.sock.connect(str(tmp_path / "z.sock"))

    def ask(method: str, path: str, token: str) -> tuple[int, str | None, bytes]:
        connection = UnixConnection("localhost")
        connection.request(method, path, headers={"Authorization": f"Bearer {token}"})
        reply = connection.getresponse()
        return reply.status, reply.getheader("WWW-Authenticate"), reply.read()

    with FakeZeusd(tmp_path / "z.sock", FakeNVML(1, A100), tokens={"r": ["gpu-read"]}):
        status, challenge, body = ask("GET", "/gpu/get_power?gpu_ids=0", "forged")
        assert (status, challenge) == (401, 'Bearer realm="zeusd"')
        assert json.loads(body) == {"error": "Invalid token: InvalidToken"}
        status, _, body = ask("GET", "/gpu/get_cumulative_energy?gpu_ids=0", "r")
        assert status == 200
        status, _, body = ask("POST", "/gpu/get_power?gpu_ids=0", "r")
        assert (status, body) == (404, b"")
    with FakeZeusd(tmp_path / "z.sock", FakeNVML(1, A100), tokens={"r": ["gpu-read"]}):
        status, _, body = ask(
            "POST", "/gpu/set_power_limit?gpu_ids=0&power_limit_mw=1&block=true", "r"
        )
        assert status == 403 and json.loads(body) == {
            "error": "Token for user 'airflow' lacks required scope 'gpu-control'. "
            "Token scopes: ['gpu-read']"
        }
