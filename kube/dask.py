"""The DaskCluster preprocess runs on (dask-kubernetes operator): the pure builder.

Worker pods mount the shared volume at the same path as the task, so the stage's temp folders
and outputs are visible to every worker. The cluster is named by the run, labelled with it and
owned by the task's pod (:func:`kube.client.dask_cluster` creates and deletes it).

Sizing the shared volume (``manifests/base/storage.yaml``, 200Gi): measured on the 14-day
sample (1.4 M raw rows, 9.6 MB of Parquet, seq_len 20), the dataset took 439 MB: 314 bytes per
raw row read (memmapped arrays, count features, cleaned Parquet), 46x the Parquet input. Raw
events take ~7 bytes per row as compressed Parquet and ~50 as CSV, so per TB of input a
dataset needs ~45 TB (Parquet) or ~6.5 TB (CSV). :func:`check_space` refuses a run whose
estimate does not fit in the volume's free space, with the numbers, before any worker starts.
"""

from __future__ import annotations

import copy
import hashlib
import re

from kube.types import ID_KEY_ENV, STORAGE, DaskTarget, memory_quantity, quantity

DATASET_BYTES_PER_ROW = 320
"""Dataset bytes per raw row at seq_len 20: 314 measured on the sample (see above), rounded up."""
RAW_BYTES_PER_ROW = {"csv": 50, "parquet": 6.5}
"""Raw bytes per event row, to estimate rows from file sizes (Parquet: the sample has 6.9; lower
estimates more rows, erring on the safe side)."""
RUN_LABEL = "dailyrec.io/run"
SERVICE_ACCOUNT = "dailyrec-dask"
"""The Dask pods' identity (manifests/base/rbac.yaml): no Role, no token, the registry's pull secrets."""
NO_SIDECAR = {"sidecar.istio.io/inject": "false"}
"""A Kubeflow profile namespace injects Istio sidecars; the default-deny egress policy keeps them from
istiod, so a pod with one never becomes Ready. Like every other pod of the project, none."""


def worker_threads(cpu: str) -> int:
    """Threads per worker: its CPU request, whole cores, at least one (without ``--nthreads`` a
    worker runs one thread per *node* CPU inside its own memory limit)."""
    return max(1, int(quantity(cpu)))


def commands(target: DaskTarget) -> dict[str, tuple[list[str], list[str]]]:
    """(command, args) of the scheduler and worker containers. distributed >= 2026.6 installs only
    the ``dask`` CLI (its subcommands ``scheduler`` and ``worker``), not the ``dask-scheduler`` /
    ``dask-worker`` executables dask-kubernetes' spec template still names."""
    return {
        "scheduler": (["dask", "scheduler"], ["--host", "0.0.0.0"]),
        "worker": (
            ["dask", "worker"],
            [
                "--name",
                "$(DASK_WORKER_NAME)",
                "--nthreads",
                str(worker_threads(target.worker_cpu)),
                "--memory-limit",
                str(int(quantity(target.worker_memory))),
                "--dashboard",
                "--dashboard-address",
                "8788",
            ],
        ),
    }


def cluster_name(run_id: str) -> str:
    """A DNS-1035 name per run id: readable prefix + digest (two runs never share a cluster)."""
    readable = re.sub(r"[^a-z0-9-]", "-", run_id.lower()).strip("-")[:24].strip("-")
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"dailyrec-pre-{readable + '-' if readable else ''}{digest}"


def safe_label(value: str) -> str:
    """A label value (63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    return (
        re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", re.sub(r"[^A-Za-z0-9._-]", "-", value)[:63])
        or "x"
    )


def estimate_dataset_bytes(input_bytes: dict[str, int], seq_len: int = 20) -> int:
    """Bytes a dataset of this input needs on the volume: rows estimated per format, times
    ``DATASET_BYTES_PER_ROW`` scaled to ``seq_len`` (the history arrays are 3 int32 per position)."""
    rows = sum(
        size / RAW_BYTES_PER_ROW.get(fmt, RAW_BYTES_PER_ROW["csv"])
        for fmt, size in input_bytes.items()
    )
    return int(rows * (DATASET_BYTES_PER_ROW + 12 * (seq_len - 20)))


def check_space(
    input_bytes: dict[str, int], free_bytes: int, seq_len: int = 20, where: str = ""
) -> int:
    """The estimate, or ValueError with the numbers when it does not fit in ``free_bytes``."""
    need = estimate_dataset_bytes(input_bytes, seq_len)
    if need > free_bytes:
        total = sum(input_bytes.values())
        raise ValueError(
            f"{where or 'the shared volume'}: the dataset needs ~{need / 2**30:.1f} GiB "
            f"({total / 2**30:.1f} GiB of input at ~{DATASET_BYTES_PER_ROW} bytes per row) but only "
            f"{free_bytes / 2**30:.1f} GiB are free; grow the PVC (sizing: kube/dask.py)"
        )
    return need


def scratch_limit(input_bytes: int, workers: int) -> str:
    """Each worker's /tmp (spill and shuffle files): twice its share of the input, at least 2Gi."""
    return memory_quantity(max(2 * 2**30, -(-2 * input_bytes // max(workers, 1)) // 2**20 * 2**20))


POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "fsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The Dask pods' securityContext: non-root (the image's user), the runtime's seccomp profile."""
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
"""The Dask containers' securityContext: no capabilities, a read-only root filesystem."""


def _lock_down(pod: dict, role: str, argv, resources: dict, scratch: str | None) -> None:
    """One role's pod spec from the operator's template: its command, the shared volume and a
    scratch emptyDir, resources, and locked down like the trainer pods."""
    # no API token (they call no Kubernetes API), no service links, non-root, the runtime's
    # seccomp profile, no capabilities, a read-only root filesystem (scratch space is an
    # emptyDir). Who may reach the scheduler's port 8786 is the NetworkPolicy "dask"
    # (manifests/base/networkpolicies.yaml): this run's pipeline pods and Dask pods only.
    pod["serviceAccountName"] = SERVICE_ACCOUNT
    empty_dir = {"sizeLimit": scratch} if scratch else {}
    pod["volumes"] = [STORAGE.volume(), {"name": "scratch", "emptyDir": empty_dir}]
    pod["automountServiceAccountToken"] = False
    pod["enableServiceLinks"] = False
    pod["securityContext"] = copy.deepcopy(POD_SECURITY)
    for container in pod["containers"]:
        container["command"], container["args"] = (list(part) for part in argv)
        container["volumeMounts"] = [STORAGE.mount(), {"name": "scratch", "mountPath": "/tmp"}]
        container.setdefault("resources", copy.deepcopy(resources))
        container["securityContext"] = copy.deepcopy(CONTAINER_SECURITY)
        container.setdefault("env", []).append(
            {"name": "DASK_TEMPORARY_DIRECTORY", "value": "/tmp"}
        )
        if role == "worker":  # workers hash the ids: the deployment's key, never a value here
            container["env"].append(copy.deepcopy(ID_KEY_ENV))


def cluster_spec(
    name: str,
    workers: int,
    target: DaskTarget,
    run_id: str | None = None,
    owner: dict | None = None,
    scratch: str | None = None,
) -> dict:
    """The DaskCluster resource: the operator's template plus resources, the shared volume,
    non-root, the run's label and owner."""
    from dask_kubernetes.operator import make_cluster_spec

    resources = {
        "requests": {"cpu": target.worker_cpu, "memory": target.worker_memory},
        "limits": {"memory": target.worker_memory},
    }
    spec = make_cluster_spec(
        name=name,
        image=target.image,
        n_workers=workers,
        resources=resources,
        env={"MLFLOW_DISABLE_TELEMETRY": "true", **target.env},
        idle_timeout=target.idle_timeout_s,
    )
    meta = spec["metadata"]
    meta["namespace"] = target.namespace
    meta["labels"] = {
        "app.kubernetes.io/part-of": "dailyrec",
        **({RUN_LABEL: safe_label(run_id)} if run_id else {}),
    }
    if owner:  # garbage-collected with the task's pod if the task dies before deleting it
        meta["ownerReferences"] = [dict(owner)]
    argv = commands(target)
    for role in ("scheduler", "worker"):
        # the operator copies this metadata onto the role's pods (and adds the run's labels)
        spec["spec"][role]["metadata"] = {
            "labels": {"app.kubernetes.io/part-of": "dailyrec", **NO_SIDECAR},
            "annotations": dict(NO_SIDECAR),
        }
        _lock_down(spec["spec"][role]["spec"], role, argv[role], resources, scratch)
    return spec
