"""docker/k8s/: the Kubernetes manifests, parsed and checked without a cluster.

No cluster, and no Kubernetes OpenAPI document, is at hand here (kubectl validates against the
server's), so each manifest is checked against a JSON Schema of the fields it uses, written
from the Kubernetes API reference (core/v1 Pod, Container, EnvVar, Volume; apps/v1 DaemonSet;
v1 Secret): the object kinds and required fields, the value types, and no field outside the
API (a typo such as ``volumeMount`` fails). Then what the deployment relies on: zeusd and the
task pods share one socket folder, only zeusd holds a capability, task pods are unprivileged
and request the GPU, leases are keyed by the node, and the store is PostgreSQL.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from airflow.sdk import Connection

from zeus_airflow.core.devices.zeusd_client import SOCK_PATH_ENV
from zeus_airflow.core.gpu_lease import NODE_NAME_ENV
from zeus_airflow.hooks.store import url_from_connection

K8S = Path(__file__).resolve().parents[1] / "docker" / "k8s"
MANIFESTS = ("zeusd-daemonset.yaml", "pod-template.yaml", "zeus-store-secret.yaml")

_STR = {"type": "string"}
_QUANTITY = {"type": ["string", "integer"]}
_LABELS = {"type": "object", "additionalProperties": _STR}
_META = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"name": _STR, "namespace": _STR, "labels": _LABELS, "annotations": _LABELS},
}
_ENV = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": _STR,
        "value": _STR,
        "valueFrom": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "fieldRef": {
                    "type": "object",
                    "required": ["fieldPath"],
                    "additionalProperties": False,
                    "properties": {"fieldPath": _STR, "apiVersion": _STR},
                },
                "secretKeyRef": {
                    "type": "object",
                    "required": ["name", "key"],
                    "additionalProperties": False,
                    "properties": {"name": _STR, "key": _STR, "optional": {"type": "boolean"}},
                },
            },
        },
    },
}
_CAPS = {"type": "array", "items": _STR}
_SECURITY = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "runAsUser": {"type": "integer"},
        "runAsGroup": {"type": "integer"},
        "runAsNonRoot": {"type": "boolean"},
        "allowPrivilegeEscalation": {"type": "boolean"},
        "privileged": {"type": "boolean"},
        "readOnlyRootFilesystem": {"type": "boolean"},
        "capabilities": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"add": _CAPS, "drop": _CAPS},
        },
    },
}
_RESOURCES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "requests": {"type": "object", "additionalProperties": _QUANTITY},
        "limits": {"type": "object", "additionalProperties": _QUANTITY},
    },
}
_CONTAINER = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "image"],
    "properties": {
        "name": _STR,
        "image": _STR,
        "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        "command": {"type": "array", "items": _STR},
        "args": {"type": "array", "items": _STR},
        "env": {"type": "array", "items": _ENV},
        "resources": _RESOURCES,
        "securityContext": _SECURITY,
        "volumeMounts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "mountPath"],
                "properties": {"name": _STR, "mountPath": _STR, "readOnly": {"type": "boolean"}},
            },
        },
    },
}
_VOLUME = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "minProperties": 2,
    "maxProperties": 2,
    "properties": {
        "name": _STR,
        "hostPath": {
            "type": "object",
            "additionalProperties": False,
            "required": ["path"],
            "properties": {
                "path": _STR,
                "type": {
                    "enum": [
                        "",
                        "DirectoryOrCreate",
                        "Directory",
                        "FileOrCreate",
                        "File",
                        "Socket",
                        "CharDevice",
                        "BlockDevice",
                    ]
                },
            },
        },
        "configMap": {"type": "object", "required": ["name"], "properties": {"name": _STR}},
        "secret": {
            "type": "object",
            "required": ["secretName"],
            "properties": {"secretName": _STR},
        },
    },
}
_TOLERATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "key": _STR,
        "operator": {"enum": ["Exists", "Equal"]},
        "value": _STR,
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
    },
}
_POD_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["containers"],
    "properties": {
        "containers": {"type": "array", "minItems": 1, "items": _CONTAINER},
        "volumes": {"type": "array", "items": _VOLUME},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]},
        "runtimeClassName": _STR,
        "priorityClassName": _STR,
        "nodeSelector": _LABELS,
        "tolerations": {"type": "array", "items": _TOLERATION},
        "securityContext": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "runAsUser": {"type": "integer"},
                "runAsGroup": {"type": "integer"},
                "fsGroup": {"type": "integer"},
                "runAsNonRoot": {"type": "boolean"},
            },
        },
    },
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "Pod": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "v1"},
            "kind": {"const": "Pod"},
            "metadata": _META,
            "spec": _POD_SPEC,
        },
    },
    "DaemonSet": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "apps/v1"},
            "kind": {"const": "DaemonSet"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "template"],
                "properties": {
                    "selector": {
                        "type": "object",
                        "required": ["matchLabels"],
                        "properties": {"matchLabels": _LABELS},
                    },
                    "updateStrategy": {
                        "type": "object",
                        "properties": {"type": {"enum": ["RollingUpdate", "OnDelete"]}},
                    },
                    "template": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["metadata", "spec"],
                        "properties": {"metadata": _META, "spec": _POD_SPEC},
                    },
                },
            },
        },
    },
    "Secret": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": {"const": "v1"},
            "kind": {"const": "Secret"},
            "metadata": _META,
            "type": _STR,
            "stringData": {"type": "object", "additionalProperties": _STR},
        },
    },
}


def load(name: str) -> dict[str, Any]:
    (document,) = list(yaml.safe_load_all((K8S / name).read_text()))
    return dict(document)


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    return {name: load(name) for name in MANIFESTS}


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_parses_and_fits_the_api_schema(name: str) -> None:
    document = load(name)
    jsonschema.validate(document, SCHEMAS[document["kind"]])


def test_the_schema_catches_a_misspelt_field(manifests: dict[str, dict[str, Any]]) -> None:
    pod = manifests["pod-template.yaml"]
    broken = {
        **pod,
        "spec": {
            **pod["spec"],
            "containers": [{**pod["spec"]["containers"][0], "volumeMount": []}],
        },
    }
    with pytest.raises(jsonschema.ValidationError, match="volumeMount"):
        jsonschema.validate(broken, SCHEMAS["Pod"])


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
    assert [by_name(s["volumes"])["zeusd-socket"]["hostPath"]["type"] for s in (daemon, pod)] == [
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
    assert (
        f"create configmap {volume['configMap']['name']}" in (K8S / "helm-values.yaml").read_text()
    )
