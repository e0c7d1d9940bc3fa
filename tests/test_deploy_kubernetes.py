"""docker/k8s/: the Kubernetes manifests, checked without a cluster.

Every manifest is validated against the Kubernetes API's own schemas (kubernetes-validate,
which ships the JSON schemas generated from each release's OpenAPI document, strict: no field
outside the API), for the oldest and newest releases it carries that matter here. The pod a
GPU task gets is built by the cncf-kubernetes provider's own ``PodGenerator.construct_pod``,
from the shipped template and the ``pod_override`` docs/deployment.md gives: the task trains
in the GPU image. Then what the deployment relies on: zeusd and the task pods share one socket
folder, only zeusd holds a capability, its image is the one docker/zeusd builds, its RAPL
mounts exist on every node, task pods are unprivileged and request the GPU, leases are keyed
by the node, the store is PostgreSQL, and the namespace's Pod Security labels admit both.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from airflow.sdk import Connection

from zeus_airflow.core.devices.zeusd_client import SOCK_PATH_ENV
from zeus_airflow.core.train.gpu_lease import NODE_NAME_ENV
from zeus_airflow.hooks.store import url_from_connection

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "docker" / "k8s"
MANIFESTS = (
    "namespace.yaml",
    "zeusd-daemonset.yaml",
    "pod-template.yaml",
    "zeus-store-secret.yaml",
)
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
CPU_IMAGE = "zeus-airflow:0.1.0"
GPU_IMAGE = "zeus-airflow:0.1.0-gpu"


def load(name: str) -> dict[str, Any]:
    (document,) = list(yaml.safe_load_all((K8S / name).read_text()))
    return dict(document)


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    return {name: load(name) for name in MANIFESTS}


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_every_manifest_in_docker_k8s_is_checked() -> None:
    assert sorted(p.name for p in K8S.glob("*.yaml")) == sorted((*MANIFESTS, "helm-values.yaml"))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_fits_the_kubernetes_api_strictly(name: str, version: str) -> None:
    kubernetes_validate.validate(load(name), version, strict=True)


def test_strict_validation_catches_a_misspelt_field(manifests: dict[str, dict[str, Any]]) -> None:
    pod = manifests["pod-template.yaml"]
    broken = {
        **pod,
        "spec": {
            **pod["spec"],
            "containers": [{**pod["spec"]["containers"][0], "volumeMount": []}],
        },
    }
    with pytest.raises(kubernetes_validate.ValidationError, match="volumeMount"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_zeusd_and_the_task_pods_share_one_socket(manifests: dict[str, dict[str, Any]]) -> None:
    daemon = manifests["zeusd-daemonset.yaml"]["spec"]["template"]["spec"]
    pod = manifests["pod-template.yaml"]["spec"]
    (zeusd,), (base,) = daemon["containers"], pod["containers"]
    socket_path = zeusd["args"][zeusd["args"].index("--socket-path") + 1]
    assert by_name(base["env"])[SOCK_PATH_ENV]["value"] == socket_path
    for spec, container in ((daemon, zeusd), (pod, base)):
        mount = next(
            m for m in container["volumeMounts"] if socket_path.startswith(m["mountPath"] + "/")
        )
        host = by_name(spec["volumes"])[mount["name"]]["hostPath"]
        assert host["path"] == posixpath.dirname(socket_path) == "/run/zeusd"
    # zeusd creates the folder; a task pod waits for it rather than making an empty one.
    assert [by_name(v["volumes"])["zeusd-socket"]["hostPath"]["type"] for v in (daemon, pod)] == [
        "DirectoryOrCreate",
        "Directory",
    ]
    assert zeusd["args"][zeusd["args"].index("--socket-permissions") + 1] == "660"
    assert (
        int(zeusd["args"][zeusd["args"].index("--socket-gid") + 1])
        == pod["securityContext"]["runAsGroup"]
    )


def test_only_zeusd_is_privileged_and_it_takes_no_gpu(manifests: dict[str, dict[str, Any]]) -> None:
    (zeusd,) = manifests["zeusd-daemonset.yaml"]["spec"]["template"]["spec"]["containers"]
    assert zeusd["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert not zeusd["securityContext"].get("privileged", False)
    assert "nvidia.com/gpu" not in zeusd["resources"].get("limits", {})  # all stay allocatable
    assert by_name(zeusd["env"])["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    pod = manifests["pod-template.yaml"]["spec"]
    (base,) = pod["containers"]
    assert base["name"] == "base"  # the container the KubernetesExecutor runs the task in
    assert base["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] > 0
    assert base["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_task_pods_key_leases_by_node_and_reach_the_store_on_postgresql(
    manifests: dict[str, dict[str, Any]],
) -> None:
    (base,) = manifests["pod-template.yaml"]["spec"]["containers"]
    env = by_name(base["env"])
    assert env[NODE_NAME_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    ref = env["AIRFLOW_CONN_ZEUS_DEFAULT"]["valueFrom"]["secretKeyRef"]
    secret = manifests["zeus-store-secret.yaml"]
    assert ref["name"] == secret["metadata"]["name"]
    uri = secret["stringData"][ref["key"]]
    store = url_from_connection(Connection.from_uri(uri, conn_id="zeus_default"))
    assert (store.drivername, store.database) == ("postgresql+psycopg", "zeus")


def test_the_helm_values_use_the_kubernetes_executor_and_the_same_store() -> None:
    values = yaml.safe_load((K8S / "helm-values.yaml").read_text())
    assert values["executor"] == "KubernetesExecutor"
    (extra,) = yaml.safe_load(values["extraEnv"])  # the chart takes it as a YAML string
    (base,) = load("pod-template.yaml")["spec"]["containers"]
    assert extra == by_name(base["env"])["AIRFLOW_CONN_ZEUS_DEFAULT"]
    (mount,) = values["scheduler"]["extraVolumeMounts"]
    (volume,) = values["scheduler"]["extraVolumes"]
    assert mount["name"] == volume["name"] and mount["readOnly"]
    assert f"{mount['mountPath']}/gpu.yaml" in (K8S / "pod-template.yaml").read_text()
    steps = (ROOT / "docs" / "deployment.md").read_text()  # "Kubernetes from zero" makes it
    assert f"create configmap {volume['configMap']['name']} --from-file=gpu.yaml=" in steps


def test_zeusd_runs_the_image_docker_zeusd_builds_and_starts_on_any_node(
    manifests: dict[str, dict[str, Any]],
) -> None:
    spec = manifests["zeusd-daemonset.yaml"]["spec"]["template"]["spec"]
    (zeusd,) = spec["containers"]
    dockerfile = (ROOT / "docker" / "zeusd" / "Dockerfile").read_text()
    tag = re.search(r"ARG ZEUSD_REF=zeusd-v(\S+)", dockerfile)
    assert tag and zeusd["image"] == f"zeusd:{tag.group(1)}" == "zeusd:0.5.0"
    assert "mlenergy/zeusd" not in (K8S / "zeusd-daemonset.yaml").read_text()
    # RAPL through folders every Linux node has: a node without powercap starts zeusd too.
    mounts = {m["mountPath"]: m for m in zeusd["volumeMounts"]}
    volumes = by_name(spec["volumes"])
    rapl = {
        path: volumes[m["name"]]["hostPath"]
        for path, m in mounts.items()
        if path.startswith("/zeus_sys/")
    }
    assert rapl == {
        "/zeus_sys/class": {"path": "/sys/class", "type": "Directory"},
        "/zeus_sys/devices/virtual": {"path": "/sys/devices/virtual", "type": "Directory"},
    }
    assert all(mounts[path]["readOnly"] for path in rapl)


def test_the_namespace_admits_zeusd_and_the_task_pods_and_still_warns(
    manifests: dict[str, dict[str, Any]],
) -> None:
    namespace = manifests["namespace.yaml"]["metadata"]
    labels = namespace["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"  # hostPath, SYS_ADMIN
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    for name in ("zeusd-daemonset.yaml", "zeus-store-secret.yaml"):
        assert manifests[name]["metadata"]["namespace"] == namespace["name"] == "airflow"


# --- the pod a GPU task gets, built by the provider's own PodGenerator ---------------------
def docs_pod_overrides() -> dict[str, Any]:
    """What docs/deployment.md's ``pod_override`` code defines (every Python block that
    starts by importing the Kubernetes models), run as a user would paste it."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", text, re.S)
        if b.startswith("from kubernetes.client import models as k8s")
    ]
    assert len(blocks) == 2, "docs/deployment.md: the template's and the chart's pod_override"
    defined: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, "docs/deployment.md", "exec"), defined)
    return defined


def task_pod(base: Any, executor_config: dict[str, Any] | None) -> Any:
    """The pod the KubernetesExecutor asks for: construct_pod as its _build_pod_request calls
    it, with the chart's image (images.airflow) as the executor's kube_image."""
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

    return PodGenerator.construct_pod(
        dag_id="gpu_job",
        task_id="train",
        pod_id="gpu-job-train-1",
        try_number=1,
        kube_image=CPU_IMAGE,
        date=None,
        args=["airflow", "tasks", "run", "gpu_job", "train", "manual"],
        pod_override_object=PodGenerator.from_obj(executor_config),
        base_worker_pod=base,
        namespace="airflow",
        scheduler_job_id="1",
    )


def test_the_helm_values_image_is_the_cpu_build() -> None:
    values = yaml.safe_load((K8S / "helm-values.yaml").read_text())
    image = values["images"]["airflow"]
    assert f"{image['repository']}:{image['tag']}" == CPU_IMAGE


def test_with_the_template_alone_a_gpu_task_would_train_on_the_cpu_image() -> None:
    """Why the docs' pod_override names the image: the executor never takes it from a pod
    template (the pitfall this guards against)."""
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

    template = PodGenerator.deserialize_model_file(str(K8S / "pod-template.yaml"))
    assert template.spec.containers[0].image == GPU_IMAGE
    (base,) = task_pod(template, {"pod_template_file": "gpu.yaml"}).spec.containers
    assert base.image == CPU_IMAGE and base.resources.limits["nvidia.com/gpu"] == "1"


def test_the_template_with_the_docs_override_trains_in_the_gpu_image() -> None:
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

    override = docs_pod_overrides()["GPU_POD_OVERRIDE"]
    template = PodGenerator.deserialize_model_file(str(K8S / "pod-template.yaml"))
    pod = task_pod(template, {"pod_template_file": "gpu.yaml", "pod_override": override})
    (base,) = pod.spec.containers
    assert base.name == "base" and base.image == GPU_IMAGE
    assert base.resources.limits["nvidia.com/gpu"] == "1"
    env = {e.name: e for e in base.env}
    assert env[SOCK_PATH_ENV].value == "/run/zeusd/zeusd.sock"
    assert env[NODE_NAME_ENV].value_from.field_ref.field_path == "spec.nodeName"
    assert [m.mount_path for m in base.volume_mounts] == ["/run/zeusd"]
    assert (
        pod.spec.runtime_class_name == "nvidia" and pod.spec.security_context.run_as_user == 50000
    )
    assert base.args[:3] == ["airflow", "tasks", "run"]  # the executor's command is kept


def test_the_docs_override_of_the_charts_pod_trains_in_the_gpu_image() -> None:
    """Without a template: the override adds the GPU, the socket and the image to the chart's
    pod (here its essentials: the CPU image and the DAG volume, which are kept). The toleration
    follows NVIDIA's ``deployments/static/nvidia-device-plugin.yml`` (NVIDIA/k8s-device-plugin,
    commit 1c3a10b, v0.17.1), which tolerates ``nvidia.com/gpu`` with ``Exists`` and
    ``NoSchedule``; Zeus itself has no Kubernetes manifest to follow."""
    from kubernetes.client import models as k8s

    chart_pod = k8s.V1Pod(
        spec=k8s.V1PodSpec(
            containers=[
                k8s.V1Container(
                    name="base",
                    image=CPU_IMAGE,
                    volume_mounts=[k8s.V1VolumeMount(name="dags", mount_path="/opt/airflow/dags")],
                )
            ],
            volumes=[k8s.V1Volume(name="dags", empty_dir=k8s.V1EmptyDirVolumeSource())],
        )
    )
    gpu_pod = docs_pod_overrides()["GPU_POD"]
    pod = task_pod(chart_pod, {"pod_override": gpu_pod})
    (base,) = pod.spec.containers
    assert base.image == GPU_IMAGE and base.resources.limits == {"nvidia.com/gpu": "1"}
    assert sorted(m.mount_path for m in base.volume_mounts) == ["/opt/airflow/dags", "/run/zeusd"]
    socket = next(v for v in pod.spec.volumes if v.name == "zeusd-socket")
    assert (socket.host_path.path, socket.host_path.type) == ("/run/zeusd", "Directory")
    assert pod.spec.runtime_class_name == "nvidia"
    assert pod.spec.node_selector == {"nvidia.com/gpu.present": "true"}
    # Issue 49: as the template's, or the pod never schedules on a tainted GPU node.
    assert [(t.key, t.operator, t.effect) for t in pod.spec.tolerations] == [
        ("nvidia.com/gpu", "Exists", "NoSchedule")
    ]


def test_zeusd_is_sized_not_to_be_killed_for_memory(manifests: dict[str, dict[str, Any]]) -> None:
    """Issue 49: 128Mi and one actix worker per CPU of the node got zeusd killed on large
    nodes; the kill left a socket file that zeusd 0.5.0 refuses to start over. Follows upstream
    zeusd's ``zeusd/src/config.rs`` (0.5.0, commit 00182ff): ``--num-workers`` is optional and
    defaults to the number of logical CPUs (``zeusd/src/main.rs`` takes
    ``available_parallelism()``), the count given to actix's ``.workers(...)``."""
    (container,) = manifests["zeusd-daemonset.yaml"]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--num-workers") + 1] == "2"
    assert container["resources"]["limits"]["memory"] == "256Mi"
