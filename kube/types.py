"""What the cluster side defines once: names, the shared volume, images, node pools, cluster targets.

The node pool of an environment (node label, taint toleration, what one training pod may
take of a node) has one source: the kustomize overlay ``manifests/overlays/<env>/`` that
installs the TrainingRuntime. :func:`placement` reads it from the overlay's JSON patches, and
:func:`cluster_target` merges it into ``kube/clusters/<env>.json`` (namespace, runtime name,
timeouts, Dask sizes), so the pipeline's ``cluster_target`` parameter, the TrainJobs and the
Katib trials all say what the overlay says.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from components.common.images import RUNTIME_IMAGE

ROOT = Path(__file__).resolve().parents[1]
OVERLAYS = ROOT / "manifests" / "overlays"
CLUSTERS = Path(__file__).with_name("clusters")

NAMESPACE = "dailyrec"
RUNTIME = "dailyrec-torch"
"""The TrainingRuntime manifests/base installs; its replicated job and container are ``node``."""
TRAINER_CONTAINER = "node"
"""The TrainingRuntime's replicated job and container name (Kubeflow Trainer's torch convention)."""


@dataclass(frozen=True)
class Storage:
    """The shared volume every pod of a run mounts at the same path (datasets/, runs/, raw/)."""

    pvc: str = "dailyrec-data"
    mount_path: str = "/mnt/dailyrec"

    def volume(self, name: str = "data") -> dict:
        return {"name": name, "persistentVolumeClaim": {"claimName": self.pvc}}

    def mount(self, name: str = "data") -> dict:
        return {"name": name, "mountPath": self.mount_path}


STORAGE = Storage()

OBJECT_STORE_SECRET = "mlpipeline-minio-artifact"
"""The object store's credentials KFP's launcher reads for a pipeline root (its default; a
pipeline root in another bucket names its own in the ``kfp-launcher`` ConfigMap's ``providers``:
kubeflow/pipelines ``backend/src/v2/config/env.go``). The pipeline's account may read this one
Secret alone; ``make deploy OBJECT_STORE_SECRET=...`` names another."""
RUNTIME_ROLE = "dailyrec-kfp-runtime"
"""The Role of what KFP's driver and launcher and Argo's executor call in each pipeline pod."""

ID_KEY_SECRET = "dailyrec-id-key"
"""Secret with key ``key``: the deployment's id secret (components.common.hashing), which the pods
that hash raw ids (preprocess, its Dask workers, serving) read as ``$DAILYREC_ID_KEY``; ``make
deploy`` creates it with a random value where it is missing."""
ID_KEY_ENV = {
    "name": "DAILYREC_ID_KEY",  # components.common.hashing.KEY_ENV (kube/ imports no pandas)
    "valueFrom": {"secretKeyRef": {"name": ID_KEY_SECRET, "key": "key"}},
}
PVC, MOUNT_PATH = STORAGE.pvc, STORAGE.mount_path


# ----------------------------------------------------------------------------- quantities

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity (``"88"``, ``"500m"``, ``"600Gi"``, ``"1e3"``) as a number."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return Decimal(match.group(1)) * Decimal(_SUFFIX[match.group(2)])


def cpu_quantity(cores: Decimal) -> str:
    """Cores as the API writes them: whole cores, else millicores (rounded down)."""
    milli = int(cores * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def memory_quantity(size: Decimal) -> str:
    """Bytes as whole Gi when exact, else Mi (rounded down)."""
    size = int(size)
    return f"{size // 2**30}Gi" if size % 2**30 == 0 else f"{size // 2**20}Mi"


# ----------------------------------------------------------------------------- node pools


@dataclass(frozen=True)
class NodeProfile:
    """What one training pod may take of a node: the overlay's TrainingRuntime resources."""

    cpu: str = "2"
    memory: str = "8Gi"
    gpus: int = 0
    """Accelerators per node (0: CPU training)."""

    def __post_init__(self) -> None:
        quantity(self.cpu), quantity(self.memory)  # noqa: B018 (refuses what is not a quantity)
        if not isinstance(self.gpus, int) or self.gpus < 0:
            raise ValueError(f"node gpus must be an integer >= 0, got {self.gpus!r}")

    def share(self, gpus: int) -> tuple[str, str]:
        """(cpu, memory) for ``gpus`` of the node's accelerators: the node's share per GPU times
        ``gpus``, so pods of several small jobs pack onto one node without overcommitting it."""
        if not self.gpus:
            return self.cpu, self.memory
        if not 1 <= gpus <= self.gpus:
            raise ValueError(f"{gpus} GPUs per node requested; the node profile has {self.gpus}")
        return (
            cpu_quantity(quantity(self.cpu) * gpus / self.gpus),
            memory_quantity(quantity(self.memory) * gpus / self.gpus),
        )


@dataclass(frozen=True)
class Placement:
    """Where training pods run: read from the overlay (:func:`placement`), never typed twice."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    node: NodeProfile = field(default_factory=NodeProfile)
    accelerator: str | None = None
    """The extended resource the node's pods request (e.g. ``nvidia.com/gpu``); None = CPU."""


_POD = "/spec/template/spec/replicatedJobs/0/template/spec/template/spec"


def placement(env: str, overlays: Path = OVERLAYS) -> Placement:
    """The node pool of ``env`` from its overlay's JSON patches on the TrainingRuntime.

    nodeSelector (``nodepool.yaml``), tolerations and the container's resources (``gpu.yaml`` /
    ``trainer.yaml``). The deploy tests check this against ``kubectl kustomize``'s rendering.
    """
    import yaml

    folder = overlays / env
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    selector, tolerations, resources = {}, [], None
    for patch in kustomization.get("patches") or []:
        if (patch.get("target") or {}).get("kind") != "TrainingRuntime" or "path" not in patch:
            continue
        for op in yaml.safe_load((folder / patch["path"]).read_text()) or []:
            if op.get("op") not in ("add", "replace"):
                continue
            if op["path"] == f"{_POD}/nodeSelector":
                selector = dict(op["value"])
            elif op["path"] == f"{_POD}/tolerations":
                tolerations = list(op["value"])
            elif op["path"] == f"{_POD}/containers/0/resources":
                resources = op["value"]
    requests = (resources or {}).get("requests") or {}
    accelerators = [k for k in requests if k not in ("cpu", "memory", "ephemeral-storage")]
    if len(accelerators) > 1:
        raise ValueError(f"{folder}: one accelerator per node pool, got {accelerators}")
    accelerator = accelerators[0] if accelerators else None
    node = NodeProfile(
        cpu=str(requests.get("cpu", NodeProfile.cpu)),
        memory=str(requests.get("memory", NodeProfile.memory)),
        gpus=int(requests[accelerator]) if accelerator else 0,
    )
    return Placement(selector, tolerations, node, accelerator)


# ----------------------------------------------------------------------------- cluster targets


@dataclass(frozen=True)
class TrainJobTarget:
    """Where and how TrainJobs run: ``kube/clusters/<env>.json`` plus the overlay's placement."""

    namespace: str = NAMESPACE
    runtime: str = RUNTIME
    """Name of the (Cluster)TrainingRuntime the manifests install."""
    runtime_kind: str = "TrainingRuntime"
    image: str | None = None
    """Trainer image; None = the runtime's own."""
    accelerator: str | None = None
    """Extended resource per process, e.g. nvidia.com/gpu; None = CPU training."""
    node: NodeProfile = field(default_factory=NodeProfile)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 6 * 3600
    """Whole-run limit (also the TrainJob's activeDeadlineSeconds)."""
    pending_timeout_s: float = 1800
    """Give up when no pod has started running for this long (unschedulable, image pull)."""
    rendezvous_timeout_s: float = 900
    """How long a node waits for all nodes to join its rendezvous (torchrun's static rendezvous
    ``timeout``): the JobSet starts every pod at once, but one may wait for a node."""
    queue_timeout_s: float = 3600
    """Give up when a queue (Kueue: the TrainJob's ``Suspended`` condition) held it this long."""
    poll_s: float = 15
    api_retries: int = 5
    """Consecutive failed API calls tolerated while following a job (backoff doubles each time)."""

    def __post_init__(self) -> None:
        if isinstance(self.node, dict):
            object.__setattr__(self, "node", NodeProfile(**self.node))
        if self.runtime_kind not in ("TrainingRuntime", "ClusterTrainingRuntime"):
            raise ValueError(
                f"runtime_kind must be TrainingRuntime or ClusterTrainingRuntime, "
                f"got {self.runtime_kind!r}"
            )
        for name in (
            "timeout_s",
            "pending_timeout_s",
            "queue_timeout_s",
            "rendezvous_timeout_s",
            "poll_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if not isinstance(self.api_retries, int) or self.api_retries < 0:
            raise ValueError(f"api_retries must be an integer >= 0, got {self.api_retries!r}")

    @classmethod
    def from_json(cls, text_or_path: str) -> TrainJobTarget:
        """From a JSON object, or the path of a JSON file; unknown keys are an error."""
        return _from_json(cls, text_or_path)


@dataclass(frozen=True)
class DaskTarget:
    """Where a DaskCluster for preprocess runs: ``kube/clusters/<env>.json``'s ``dask`` block."""

    namespace: str = NAMESPACE
    image: str = RUNTIME_IMAGE
    """Must hold the same dailyrec, dask and pandas versions as the task: make deploy pins the
    pushed runtime image here."""
    worker_cpu: str = "2"
    worker_memory: str = "8Gi"
    env: dict[str, str] = field(default_factory=dict)
    idle_timeout_s: int = 600
    """The operator deletes a cluster idle this long (a crashed task leaves none behind for long)."""
    start_timeout_s: int = 900
    """Give up (naming what each pod waits for) when the scheduler is not ready after this long:
    dask-kubernetes itself waits for ever on a pod that never becomes Ready."""

    def __post_init__(self) -> None:
        quantity(self.worker_cpu), quantity(self.worker_memory)  # noqa: B018
        if not self.start_timeout_s > 0:
            raise ValueError("start_timeout_s must be > 0")

    @classmethod
    def from_json(cls, text_or_path: str) -> DaskTarget:
        return _from_json(cls, text_or_path)


def _from_json(cls: type, text_or_path: str) -> Any:
    text = (
        Path(text_or_path).read_text()
        if not text_or_path.lstrip().startswith("{")
        else text_or_path
    )
    doc = {k: v for k, v in json.loads(text).items() if not k.startswith("_")}
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(
            f"cluster target: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return cls(**doc)


PLACEMENT_KEYS = ("accelerator", "node", "node_selector", "tolerations")
"""TrainJob target keys that come from the overlay only."""


def cluster_target(env: str, images: dict[str, str] | None = None) -> str:
    """The ``cluster_target`` pipeline parameter of ``env`` (compact JSON): ``kube/clusters/<env>.json``
    with the overlay's placement merged into its ``trainjob`` block and, given ``images``
    (``{"runtime": ref, "trainer": ref}``), the pushed images pinned for TrainJobs and Dask."""
    path = CLUSTERS / f"{env}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CLUSTERS.glob("*.json")))
        raise ValueError(f"no cluster target {path}; known environments: {known}")
    doc = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    typed = sorted(set(doc.get("trainjob", {})) & set(PLACEMENT_KEYS))
    if typed:
        raise ValueError(
            f"{path}: {', '.join(typed)} come from manifests/overlays/{env} (the node pool "
            f"is defined once, there); remove them here"
        )
    where = placement(env)
    doc["trainjob"] = {
        **doc.get("trainjob", {}),
        "accelerator": where.accelerator,
        "node": dataclasses.asdict(where.node),
        "node_selector": where.node_selector,
        "tolerations": where.tolerations,
    }
    doc.setdefault("dask", {})
    doc["dask"].setdefault("image", RUNTIME_IMAGE)
    if images:
        doc["trainjob"]["image"] = images["trainer"]
        doc["dask"]["image"] = images["runtime"]
    TrainJobTarget(**doc["trainjob"]), DaskTarget(**doc["dask"])  # noqa: B018 (typos fail here)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
