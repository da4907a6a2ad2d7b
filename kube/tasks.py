"""Kubernetes settings of the pipeline's KFP tasks: the shared volume, resources, labels, Secrets.

Applied to the compiled pipeline only (kfp.local ignores Kubernetes settings), so the same
``pipelines/daily.py`` runs locally and on the cluster.
"""

from __future__ import annotations

from kfp import kubernetes

from components.common.attempts import RUN_ID_ENV
from components.common.monitoring import PUSHGATEWAY_ENV
from components.common.signing import SIGNING_KEY_ENV, VERIFY_KEY_ENV
from kube.types import ID_KEY_ENV, ID_KEY_SECRET, MOUNT_PATH, PVC

KEY_ENV = ID_KEY_ENV["name"]

WORKFLOW_ENV = "KFP_WORKFLOW"
"""The Argo Workflow of the task's run (from the pod's label): the training launcher reads it on
SIGTERM to tell a cancelled run (delete its TrainJob) from a drained pod (leave it to be adopted)."""

MLFLOW_SECRET = "mlflow-pipeline-auth"
"""Secret with keys username/password: the pipeline's MLflow account (manifests/README.md, Secrets)."""
MLFLOW_CLIENTS = ("train-op", "evaluate-op", "register-op", "tune-op", "finalize")
"""Tasks that talk to MLflow: only they get its credentials and (NetworkPolicy) its port (finalize
reads which runs the champion and previous versions came from: retention keeps them)."""
VERIFYING_CLIENTS = ("train-op", "evaluate-op", "register-op", "tune-op")
"""MLflow clients that load registered models (the champion, a warm start): they get the public
key that verifies a model's signature."""
SIGNING_CLIENTS = ("register-op",)
"""The one task that signs: only it gets the private key."""
SIGNING_SECRET = "dailyrec-model-signing"
"""Optional Secret with key ``key``: the Ed25519 private key that signs registered models' digests
(components/common/signing.py)."""
VERIFY_CONFIG = "dailyrec-model-verify"
"""Optional ConfigMap with key ``key``: its public key, which every loader verifies with."""
ID_KEY_CLIENTS = ("preprocess-op",)
"""Tasks that hash raw ids (with their Dask workers, kube/dask.py): only they get the id secret."""
MONITORING_CONFIG = "dailyrec-monitoring"
"""Optional ConfigMap with key ``pushgateway`` (e.g. http://pushgateway.monitoring:9091): where the exit
handler pushes the run's outcome (docs/cluster.md, Monitoring)."""
PUSHGATEWAY_CLIENT_LABEL = "dailyrec.io/pushgateway-client"
TASK_LABEL = "dailyrec.io/task"
MLFLOW_CLIENT_LABEL = "dailyrec.io/mlflow-client"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
"""Argo's label on every pod of a run: the Workflow the launcher reads to tell a cancel from a drain."""
# (cpu request, memory request, memory limit) per task: the launcher only waits on the TrainJob
RESOURCES = {
    "check-parameters": ("250m", "512Mi", "1Gi"),
    "resolve-window": ("250m", "512Mi", "1Gi"),
    "preprocess-op": ("4", "16Gi", "24Gi"),
    "estimate-op": ("500m", "2Gi", "4Gi"),
    "train-op": ("500m", "1Gi", "2Gi"),
    "evaluate-op": ("2", "8Gi", "12Gi"),
    "register-op": ("500m", "2Gi", "4Gi"),
    "finalize": ("250m", "512Mi", "1Gi"),
}


def on_cluster(task, name: str):
    """Shared volume, resource requests/limits, pod labels (the NetworkPolicies select on them) and, for
    the tasks that talk to MLflow, its credentials from a Secret (never a parameter); returns the task."""
    kubernetes.mount_pvc(task, pvc_name=PVC, mount_path=MOUNT_PATH)
    cpu, memory, memory_limit = RESOURCES[name]
    task.set_cpu_request(cpu).set_memory_request(memory).set_memory_limit(memory_limit)
    kubernetes.add_pod_label(task, TASK_LABEL, name)
    # the run id without making it an input (an input would change the preprocess cache key): it
    # names the run's Dask cluster and scopes the record of a final failure (no retry repeats it)
    kubernetes.use_field_path_as_env(task, RUN_ID_ENV, "metadata.labels['pipeline/runid']")
    if name in ("train-op", "tune-op"):  # on SIGTERM: was the run cancelled, or the pod drained?
        kubernetes.use_field_path_as_env(task, WORKFLOW_ENV, f"metadata.labels['{WORKFLOW_LABEL}']")
    if name in ID_KEY_CLIENTS:  # required: ids hashed under a public key would be reversible
        kubernetes.use_secret_as_env(
            task, secret_name=ID_KEY_SECRET, secret_key_to_env={"key": KEY_ENV}
        )
    if name in MLFLOW_CLIENTS:
        mlflow_client(task, signing=name in SIGNING_CLIENTS, verifying=name in VERIFYING_CLIENTS)
    if (
        name == "finalize"
    ):  # the exit handler pushes the run's outcome when the ConfigMap names a gateway
        kubernetes.add_pod_label(task, PUSHGATEWAY_CLIENT_LABEL, "true")
        kubernetes.use_config_map_as_env(
            task, MONITORING_CONFIG, {"pushgateway": PUSHGATEWAY_ENV}, optional=True
        )
    return task


def mlflow_client(task, signing: bool = False, verifying: bool = True):
    """Let a task reach MLflow (pod label for the NetworkPolicy) with the pipeline's credentials;
    ``verifying``: with the optional public key that verifies models (tasks that load them);
    ``signing``: with the optional private key too (the task that registers them)."""
    kubernetes.add_pod_label(task, MLFLOW_CLIENT_LABEL, "true")
    kubernetes.use_secret_as_env(
        task,
        secret_name=MLFLOW_SECRET,
        secret_key_to_env={
            "username": "MLFLOW_TRACKING_USERNAME",
            "password": "MLFLOW_TRACKING_PASSWORD",
        },
    )
    # optional: with them, registered models are signed and loaders require the signature
    if verifying:
        kubernetes.use_config_map_as_env(
            task, VERIFY_CONFIG, {"key": VERIFY_KEY_ENV}, optional=True
        )
    if signing:
        kubernetes.use_secret_as_env(
            task,
            secret_name=SIGNING_SECRET,
            secret_key_to_env={"key": SIGNING_KEY_ENV},
            optional=True,
        )
    return task


def sized_by(task, cpu, memory):
    """Requests = limits from channels (another task's outputs): the KFP backend's driver resolves
    resource placeholders at run time (``getPodResource``); kfp.local ignores resources."""
    return (
        task.set_cpu_request(cpu)
        .set_cpu_limit(cpu)
        .set_memory_request(memory)
        .set_memory_limit(memory)
    )
