"""docker/: the compose file as ``docker-compose config`` resolves it, the image's pins, and the
GPU workers' entrypoint.

These machines have the Docker client but no engine, so no image is built and no container
runs here; what can be checked is checked: the file validates (Debian's ``docker-compose``),
the services, capabilities, GPU reservations, health checks and wiring it resolves to, and the
capability hand-over of ``gpu-worker-entrypoint.sh``, run for real (it needs root, as the
project's machines and CI are).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk import Connection

from zeus_airflow.hooks.store import url_from_connection

DOCKER = Path(__file__).resolve().parents[1] / "docker"
COMPOSE = DOCKER / "docker-compose.yaml"
ENTRYPOINT = DOCKER / "gpu-worker-entrypoint.sh"
CAP_SYS_ADMIN = 1 << 21

AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
    "airflow-gpu-worker-0",
}
GPU_WORKERS = {"airflow-gpu-worker-0"}
SHARED_SETTINGS = (
    "AIRFLOW__CORE__EXECUTOR",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__CELERY__BROKER_URL",
    "AIRFLOW__CELERY__RESULT_BACKEND",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW_CONN_ZEUS_DEFAULT",
)
"""What every Airflow component must agree on, on every node."""


def compose_config(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` with only ``settings`` set: no developer's docker/.env or
    exported variables leak in."""
    docker_compose = shutil.which("docker-compose")
    assert docker_compose, "docker-compose is missing: apt-get install -y docker-compose"
    env_file = tmp_path / "empty.env"
    env_file.touch()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "POSTGRES", "ZEUS_", "COMPOSE_"))
    }
    return subprocess.run(
        [docker_compose, "-f", str(COMPOSE), "--env-file", str(env_file), "config"],
        env={**env, **settings},
        capture_output=True,
        text=True,
        timeout=60,
    )


def resolved(tmp_path: Path, **settings: str) -> dict[str, Any]:
    result = compose_config(tmp_path, **{"AIRFLOW_JWT_SECRET": "s" * 64, **settings})
    assert result.returncode == 0, result.stderr
    return dict(yaml.safe_load(result.stdout)["services"])


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved(tmp_path_factory.mktemp("compose"))


def test_the_file_validates_to_the_cluster_services(services: dict[str, Any]) -> None:
    assert set(services) == AIRFLOW_SERVICES | {"postgres", "redis", "zeusd"}
    commands = {name: services[name]["command"] for name in AIRFLOW_SERVICES - {"airflow-init"}}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
        "airflow-worker": "celery worker --queues default",
        "airflow-gpu-worker-0": "celery worker --queues gpu --concurrency 1",
    }


def test_only_gpu_workers_reserve_gpus_and_get_sys_admin(services: dict[str, Any]) -> None:
    for name, service in services.items():
        devices = (
            service.get("deploy", {})
            .get("resources", {})
            .get("reservations", {})
            .get("devices", [])
        )
        if name == "zeusd":
            assert service["cap_add"] == ["SYS_ADMIN"] and service["cap_drop"] == ["ALL"]
            assert [(d["driver"], d["count"]) for d in devices] == [("nvidia", "all")]
            continue
        if name in GPU_WORKERS:
            assert service["cap_add"] == ["SYS_ADMIN"]
            assert [(d["driver"], d["capabilities"]) for d in devices] == [("nvidia", ["gpu"])]
            assert service["user"] == "0:0"  # the entrypoint drops to the airflow user
            # ...but docker exec does not: the health check must find the airflow user's
            # packages (under ~airflow/.local in the official image) as root.
            assert service["healthcheck"]["test"][1].startswith("HOME=/home/airflow celery ")
            assert service["image"].endswith("-gpu") and service["build"]["target"] == "gpu"
        else:
            assert "cap_add" not in service and not devices, name
            assert service.get("user", "50000:0") != "0:0", name


def test_each_gpu_worker_has_gpus_and_a_stable_hostname_of_its_own(
    services: dict[str, Any],
) -> None:
    ids = [
        device_id
        for name in GPU_WORKERS
        for device in services[name]["deploy"]["resources"]["reservations"]["devices"]
        for device_id in device["device_ids"]
    ]
    assert ids and len(ids) == len(set(ids))
    # Power-limit leases are keyed by host name: a container's random one would be lost.
    hostnames = [services[name].get("hostname") for name in GPU_WORKERS]
    assert all(hostnames) and len(set(hostnames)) == len(hostnames)


def test_gpu_worker_hostnames_name_the_node(tmp_path: Path) -> None:
    hostname = resolved(tmp_path, ZEUS_NODE_NAME="rack7")["airflow-gpu-worker-0"]["hostname"]
    assert hostname == "rack7-gpu-worker-0"


def mounts_of(service: dict[str, Any]) -> dict[str, str]:
    """Volume or host path -> where it is mounted (``docker-compose config`` writes
    ``source:target[:mode]``)."""
    return {v.split(":")[0]: v.split(":")[1] for v in service.get("volumes", [])}


def test_gpu_workers_reach_zeusd_through_its_socket_and_only_they(services: dict[str, Any]) -> None:
    from zeus_airflow.core.devices.zeusd_client import SOCK_PATH_ENV

    command = services["zeusd"]["command"]
    socket_path = command[command.index("--socket-path") + 1]
    assert command[command.index("--socket-permissions") + 1] == "660"  # not the world's
    sharing = {name for name, service in services.items() if "zeusd-socket" in mounts_of(service)}
    assert sharing == GPU_WORKERS | {"zeusd"}
    for name in GPU_WORKERS | {"zeusd"}:
        service = services[name]
        assert socket_path.startswith(mounts_of(service)["zeusd-socket"] + "/")
        if name != "zeusd":
            assert service["environment"][SOCK_PATH_ENV] == socket_path
            assert service["depends_on"]["zeusd"] == {"condition": "service_healthy"}
    assert "ports" not in services["zeusd"]  # a socket only: nothing listens on the network


def test_long_running_services_have_health_checks_and_restart(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name == "airflow-init":
            assert service.get("restart", "no") == "no" and "healthcheck" not in service
            continue
        assert service["restart"] == "always", name
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name


def test_airflow_starts_after_init_and_workers_after_the_api_server(
    services: dict[str, Any],
) -> None:
    for name in AIRFLOW_SERVICES:
        needs = services[name]["depends_on"]
        assert needs["postgres"] == needs["redis"] == {"condition": "service_healthy"}
        if name != "airflow-init":
            assert needs["airflow-init"] == {"condition": "service_completed_successfully"}
        if "worker" in name:  # tasks talk to the Execution API from their first step
            assert needs["airflow-apiserver"] == {"condition": "service_healthy"}


def test_init_migrates_both_schemas_then_creates_the_admin(services: dict[str, Any]) -> None:
    script = services["airflow-init"]["command"][-1]
    steps = [
        script.index(step)
        for step in (
            "airflow db migrate",
            "zeus-airflow db upgrade",
            "airflow users create --role Admin",
        )
    ]
    assert steps == sorted(steps)
    assert services["airflow-init"]["command"][:2] == ["bash", "-euc"]  # a failed step fails


def test_the_store_is_its_own_database_on_the_metadata_server(services: dict[str, Any]) -> None:
    init_sql = (DOCKER / "postgres-init" / "10-zeus-store.sql").read_text()
    created = re.findall(r"^CREATE DATABASE (\w+);", init_sql, flags=re.MULTILINE)
    env = services["airflow-worker"]["environment"]
    # The store engineer's hook turns the Connection into the store's URL, as a task does.
    store = url_from_connection(
        Connection.from_uri(env["AIRFLOW_CONN_ZEUS_DEFAULT"], conn_id="zeus_default")
    )
    metadata = Connection.from_uri(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], conn_id="meta")
    assert created == [store.database]
    assert store.drivername == "postgresql+psycopg"
    assert (store.host, store.port) == (metadata.host, metadata.port) == ("postgres", 5432)
    assert store.database != metadata.schema == services["postgres"]["environment"]["POSTGRES_DB"]
    mounts = [volume.split(":") for volume in services["postgres"]["volumes"]]
    assert [
        str(DOCKER / "postgres-init" / "10-zeus-store.sql"),
        "/docker-entrypoint-initdb.d/10-zeus-store.sql",
        "ro",
    ] in mounts


def test_every_component_shares_executor_secret_and_store(services: dict[str, Any]) -> None:
    shared = {
        name: {k: services[name]["environment"][k] for k in SHARED_SETTINGS}
        for name in AIRFLOW_SERVICES
    }
    assert len({tuple(settings.values()) for settings in shared.values()}) == 1
    assert shared["airflow-worker"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    # Workers run the same DAG files the dag-processor parsed.
    # (GPU workers also mount zeusd's socket.)
    mounts = {
        name: sorted(v for v in services[name]["volumes"] if "zeusd-socket" not in v)
        for name in AIRFLOW_SERVICES
    }
    assert len({tuple(volumes) for volumes in mounts.values()}) == 1
    dags = [v.split(":")[0] for v in mounts["airflow-worker"] if ":/opt/airflow/dags:" in v]
    assert dags == [str(DOCKER.parent / "dags")]


def test_the_jwt_secret_must_be_set(tmp_path: Path) -> None:
    result = compose_config(tmp_path)
    assert result.returncode != 0
    assert "set AIRFLOW_JWT_SECRET" in result.stderr


def test_gpu_nodes_point_every_connection_at_the_control_node(tmp_path: Path) -> None:
    control = "control.example.internal"
    env = resolved(tmp_path, ZEUS_DB_HOST=control, ZEUS_BROKER_HOST=control, ZEUS_API_HOST=control)[
        "airflow-gpu-worker-0"
    ]["environment"]
    for key in SHARED_SETTINGS[1:5] + SHARED_SETTINGS[6:]:
        assert f"@{control}:" in env[key] or f"//{control}:" in env[key], key


def test_the_image_is_the_airflow_the_tests_run_and_pins_celery() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    pinned = re.search(r"^ARG AIRFLOW_VERSION=(\S+)$", dockerfile, re.MULTILINE)
    assert pinned and pinned[1] == importlib.metadata.version("apache-airflow")
    assert "FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION} AS source" in dockerfile
    assert set(re.findall(r"^FROM source AS (\w+)$", dockerfile, re.MULTILINE)) == {"cpu", "gpu"}
    requirements = (DOCKER / "requirements.txt").read_text().splitlines()
    assert {"apache-airflow==${AIRFLOW_VERSION}", "celery<5.7"} <= set(requirements)
    # Everything the image copies survives Dockerfile.dockerignore's allow-list.
    allowed = {
        line[1:].rstrip("/")
        for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = {
        source
        for line in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", dockerfile, re.MULTILINE)
        for source in line.split()
    }
    assert copied <= allowed


# --- the GPU workers' entrypoint ----------------------------------------------------------------
def run_entrypoint(*setpriv: str) -> tuple[str, dict[str, int], str]:
    """(uid:gid, capability sets, stderr) of a command started by the entrypoint, which is
    itself started through ``setpriv`` with ``setpriv`` options (to take capabilities away)."""
    assert os.geteuid() == 0, "the entrypoint's hand-over can only be tested as root"
    show = "id -u; id -g; grep -E '^Cap(Eff|Amb|Bnd):' /proc/self/status"
    result = subprocess.run(
        ["setpriv", *setpriv, "--", str(ENTRYPOINT), "sh", "-c", show],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={**os.environ, "AIRFLOW_UID": "50000"},
    )
    uid, gid, *caps = result.stdout.split("\n")
    return (
        f"{uid}:{gid}",
        {line.split(":")[0]: int(line.split()[1], 16) for line in caps if line},
        result.stderr,
    )


def test_entrypoint_hands_exactly_sys_admin_to_the_airflow_user() -> None:
    user, caps, said = run_entrypoint()
    assert user == "50000:0"
    assert caps == {"CapEff": CAP_SYS_ADMIN, "CapAmb": CAP_SYS_ADMIN, "CapBnd": CAP_SYS_ADMIN}
    assert "CAP_SYS_ADMIN granted" in said


def test_entrypoint_without_sys_admin_runs_unprivileged_and_says_so() -> None:
    user, caps, said = run_entrypoint("--bounding-set=-sys_admin")
    assert user == "50000:0"
    assert caps == {"CapEff": 0, "CapAmb": 0, "CapBnd": 0}
    assert "measure mode" in said


def test_entrypoint_started_as_a_user_leaves_everything_alone() -> None:
    user, caps, said = run_entrypoint("--reuid=65534", "--regid=65534", "--clear-groups")
    assert user == "65534:65534"
    assert caps["CapEff"] == caps["CapAmb"] == 0
    assert "not root" in said


def test_zeusd_is_built_from_docker_zeusd_and_reads_rapl_through_folders_every_host_has(
    services: dict[str, Any],
) -> None:
    zeusd = services["zeusd"]
    assert zeusd["image"] == "zeusd:0.5.0"  # the release tag the recipe builds
    assert Path(zeusd["build"]["context"]) == COMPOSE.parent / "zeusd"
    binds = {
        (v["source"], v["target"], v.get("read_only", False))
        if isinstance(v, dict)
        else (*v.split(":")[:2], v.endswith(":ro"))
        for v in zeusd["volumes"]
        if "zeus_sys" in str(v)
    }
    assert binds == {
        ("/sys/class", "/zeus_sys/class", True),
        ("/sys/devices/virtual", "/zeus_sys/devices/virtual", True),
    }
