"""Preprocessing on a Dask cluster in Kubernetes (the dask-kubernetes operator's ``DaskCluster``).

``scheduler="kubernetes"`` starts a DaskCluster sized by ``workers`` and the
:class:`DaskClusterTarget` (image, worker CPU/memory, the shared volume),
runs the stage against it and deletes it afterwards. Worker pods mount the same
volume at the same path as the task, so the stage's temp folders and outputs
are visible to every worker. The values come from the pipeline (a JSON
target, ``$DAILYREC_DASK_CLUSTER``), never from here.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TARGET_ENV = "DAILYREC_DASK_CLUSTER"


@dataclass(frozen=True)
class DaskClusterTarget:
    namespace: str = "dailyrec"
    image: str = "ghcr.io/dailyrec/dailyrec-runtime:0.1.0"
    """Must hold the same dailyrec, dask and pandas versions as the task."""
    worker_cpu: str = "2"
    worker_memory: str = "8Gi"
    pvc: str = "dailyrec-data"
    mount_path: str = "/mnt/dailyrec"
    env: dict[str, str] = field(default_factory=dict)
    idle_timeout_s: int = 600
    """The operator deletes a cluster idle this long (a crashed task leaves none behind for long)."""

    @classmethod
    def from_env(cls) -> DaskClusterTarget:
        doc = json.loads(os.environ.get(TARGET_ENV) or "{}")
        return cls(**{k: v for k, v in doc.items() if not k.startswith("_")})


def cluster_spec(name: str, workers: int, target: DaskClusterTarget) -> dict:
    """The DaskCluster resource: the operator's template plus resources, the shared volume, non-root."""
    from dask_kubernetes.operator import make_cluster_spec

    resources = {"requests": {"cpu": target.worker_cpu, "memory": target.worker_memory},
                 "limits": {"memory": target.worker_memory}}
    spec = make_cluster_spec(name=name, image=target.image, n_workers=workers, resources=resources,
                             env={"MLFLOW_DISABLE_TELEMETRY": "true", **target.env},
                             idle_timeout=target.idle_timeout_s)
    spec["metadata"]["namespace"] = target.namespace
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": target.pvc}}
    mount = {"name": "data", "mountPath": target.mount_path}
    for role in ("scheduler", "worker"):
        pod = spec["spec"][role]["spec"]
        # locked down like the trainer pods: no API token (they call no Kubernetes API), no service
        # links, non-root, the runtime's seccomp profile, no capabilities, a read-only root filesystem
        # (scratch space is an emptyDir). Who may reach the scheduler's port 8786 is the NetworkPolicy
        # "dask" (manifests/base/networkpolicies.yaml): this run's pipeline pods and Dask pods only.
        pod["volumes"] = [volume, {"name": "scratch", "emptyDir": {}}]
        pod["automountServiceAccountToken"] = False
        pod["enableServiceLinks"] = False
        pod["securityContext"] = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                  "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
        for container in pod["containers"]:
            container["volumeMounts"] = [mount, {"name": "scratch", "mountPath": "/tmp"}]
            container.setdefault("resources", copy.deepcopy(resources))
            container["securityContext"] = {"allowPrivilegeEscalation": False, "privileged": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
            container.setdefault("env", []).append({"name": "DASK_TEMPORARY_DIRECTORY", "value": "/tmp"})
    return spec


def validate_cluster_spec(spec: dict, kubernetes_version: str = "1.32") -> list[str]:
    """Problems of a DaskCluster spec, offline: the operator's CRD schema, then its pods as Pods."""
    import dask_kubernetes.operator as operator
    import jsonschema
    import kubernetes_validate

    templates = yaml.safe_load((Path(operator.__file__).parent / "customresources" / "templates.yaml")
                               .read_text())
    definitions = templates["definitions"]

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref:  # the operator's own types resolve here; Kubernetes ones (PodSpec) are
                # checked below with kubernetes-validate
                return resolve(definitions.get(ref.rsplit("/", 1)[-1], {"type": "object"}))
            return {k: resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node

    problems = [f"DaskCluster: {e.message} at {'/'.join(map(str, e.absolute_path))}"
                for e in jsonschema.Draft7Validator(resolve(definitions["dask.k8s.api.v1.DaskCluster"]))
                .iter_errors(spec)]
    for role in ("scheduler", "worker"):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{role}"},
               "spec": spec["spec"][role]["spec"]}
        try:
            kubernetes_validate.validate(pod, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{role} pod: {exc.message}")
    return problems


@contextlib.contextmanager
def kube_cluster(workers: int | None, name: str | None = None) -> Iterator[Any]:
    """A DaskCluster for the duration of the block (deleted afterwards, also on errors)."""
    from dask_kubernetes.operator import KubeCluster

    target = DaskClusterTarget.from_env()
    name = name or f"dailyrec-pre-{os.getpid()}"
    spec = cluster_spec(name, workers or 2, target)
    cluster = KubeCluster(custom_cluster_spec=spec, namespace=target.namespace, shutdown_on_close=True)
    try:
        yield cluster
    finally:
        cluster.close()


