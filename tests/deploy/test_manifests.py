"""The kustomize manifests, rendered offline and checked against the cluster's contracts.

No API server here: built-in kinds are validated with kubernetes-validate (strict: unknown
fields fail, as with the API server's strict field validation), Kubeflow Trainer kinds
with the CRDs' own OpenAPI schemas from ``manifests/schemas/crds`` (made strict the same
way), and the structure the code relies on (names, RBAC, mounts, GPU settings) by explicit
checks. kubectl comes with the test extras; without it every test here skips (fails under CI).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kube.validate import crd_schemas
from tests.deploy.conftest import KUBECTL, MANIFESTS, TARGETS, render, render_text
from tests.rbac import KFP_RUNTIME_RULES, role_triples
from tests.tools import CRD_DIR, KUBECTL_HOW, require_tool


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    """Every check here renders the overlays with `kubectl kustomize` (kustomize v5 built in)."""
    require_tool("kubectl", KUBECTL_HOW)


K8S_VERSION = "1.32"
"""Kubernetes version whose API schemas validate the built-in kinds."""
NAMESPACE = "dailyrec"
RUNTIME = "dailyrec-torch"
TRAINER_JOB = TRAINER_CONTAINER = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


# ----------------------------------------------------------------------------- helpers


def objects(overlay: str, kind: str | None = None, name: str | None = None) -> list[dict]:
    return [
        o
        for o in render(overlay)
        if (kind is None or o["kind"] == kind) and (name is None or o["metadata"]["name"] == name)
    ]


def one(overlay: str, kind: str, name: str) -> dict:
    found = objects(overlay, kind, name)
    assert len(found) == 1, f"{overlay}: expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_templates(obj: dict) -> Iterator[tuple[str, dict]]:
    """(where, pod template) for every pod an object creates: workloads and Trainer runtimes."""
    spec = obj.get("spec") or {}
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield obj["kind"], spec["template"]
    elif obj["kind"] == "CronJob":
        yield "CronJob", spec["jobTemplate"]["spec"]["template"]
    elif obj["kind"] == "Pod":
        yield "Pod", {"metadata": obj["metadata"], "spec": spec}
    elif obj["kind"] in ("TrainingRuntime", "ClusterTrainingRuntime"):
        for job in spec["template"]["spec"]["replicatedJobs"]:
            yield f"replicatedJob {job['name']}", job["template"]["spec"]["template"]


def all_pods(overlay: str) -> Iterator[tuple[str, dict]]:
    for obj in render(overlay):
        for where, template in pod_templates(obj):
            yield f"{obj['kind']}/{obj['metadata']['name']} {where}", template


def runtime_job(overlay: str) -> dict:
    jobs = one(overlay, "TrainingRuntime", RUNTIME)["spec"]["template"]["spec"]["replicatedJobs"]
    assert [j["name"] for j in jobs] == [TRAINER_JOB]
    return jobs[0]


def runtime_pod(overlay: str) -> dict:
    return runtime_job(overlay)["template"]["spec"]["template"]["spec"]


def runtime_container(overlay: str) -> dict:
    containers = runtime_pod(overlay)["containers"]
    assert [c["name"] for c in containers] == [TRAINER_CONTAINER]
    return containers[0]


def mlflow_container(overlay: str) -> dict:
    pod = one(overlay, "Deployment", "mlflow")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["mlflow"]
    return pod["containers"][0]


@functools.cache
def pipeline_defaults() -> dict[str, Any]:
    """The daily pipeline's parameter defaults (as make run and the KFP run form see them)."""
    from pipelines.local import pipeline_parameters

    return dict(pipeline_parameters())


# ----------------------------------------------------------------------------- schemas


@functools.cache
def crd_validators() -> dict[tuple[str, str], Any]:
    """(apiVersion, kind) -> a strict jsonschema validator of the shipped Trainer CRDs."""
    import jsonschema

    return {key: jsonschema.Draft7Validator(schema) for key, schema in crd_schemas(CRD_DIR).items()}


def crd_errors(obj: dict) -> list[str]:
    validator = crd_validators()[(obj["apiVersion"], obj["kind"])]
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]


def k8s_errors(obj: dict) -> str | None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{'/'.join(map(str, exc.path))}: {exc.message}"
    return None


# ----------------------------------------------------------------------------- rendering + schemas


@pytest.mark.parametrize("overlay", TARGETS)
def test_renders(overlay: str) -> None:
    kinds = {o["kind"] for o in render(overlay)}
    assert {
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "ConfigMap",
        "Deployment",
        "Service",
        "NetworkPolicy",
        "TrainingRuntime",
    } <= kinds


@pytest.mark.parametrize("overlay", TARGETS)
def test_builtin_kinds_validate_strictly(overlay: str) -> None:
    checked, custom, errors = 0, set(), []
    for obj in render(overlay):
        try:
            error = k8s_errors(obj)
        except kubernetes_validate.SchemaNotFoundError:
            custom.add(f"{obj['apiVersion']} {obj['kind']}")  # validated against its CRD below
            continue
        if error is not None:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {error}")
        checked += 1
    assert not errors, "\n".join(errors)
    assert checked >= 9
    assert custom == {"trainer.kubeflow.org/v1alpha1 TrainingRuntime"}


@pytest.mark.parametrize("overlay", TARGETS)
def test_runtime_pod_template_is_a_valid_job(overlay: str) -> None:
    """The CRD embeds Job/Pod schemas loosely; check the template as the Job JobSet will create."""
    job = runtime_job(overlay)["template"]
    as_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "dailyrec-x-node-0", **job.get("metadata", {})},
        "spec": job["spec"],
    }
    assert k8s_errors(as_job) is None, k8s_errors(as_job)


def test_strict_validation_catches_unknown_fields() -> None:
    """Negative control: the strict validators really refuse a misspelt field."""
    deployment = one("base", "Deployment", "mlflow")
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    assert "resource" in k8s_errors(deployment)
    runtime = one("base", "TrainingRuntime", RUNTIME)
    assert crd_errors(runtime) == []
    # a valid value of a field Trainer 2.3 removed (processes per node now come from the TrainJob)
    runtime["spec"]["mlPolicy"]["torch"]["numProcPerNode"] = 8
    assert any(
        e.startswith("spec/mlPolicy/torch:") and "'numProcPerNode' was unexpected" in e
        for e in crd_errors(runtime)
    ), crd_errors(runtime)


def test_the_trainer_crds_travel_with_the_repository() -> None:
    """The schemas are part of the repo (a fresh clone validates the Trainer kinds too)."""
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == [
        "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        "trainer.kubeflow.org_trainingruntimes.yaml",
        "trainer.kubeflow.org_trainjobs.yaml",
    ]
    assert set(crd_validators()) == {
        ("trainer.kubeflow.org/v1alpha1", kind)
        for kind in ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")
    }


@pytest.mark.parametrize("overlay", TARGETS)
def test_trainer_kinds_validate_against_crds(overlay: str) -> None:
    custom = [o for o in render(overlay) if o["apiVersion"].startswith("trainer.kubeflow.org/")]
    assert custom, "no Kubeflow Trainer objects rendered"
    for obj in custom:
        assert (obj["apiVersion"], obj["kind"]) in crd_validators(), f"no CRD for {obj['kind']}"
        errors = crd_errors(obj)
        assert not errors, f"{obj['kind']}/{obj['metadata']['name']}:\n" + "\n".join(errors)


# ----------------------------------------------------------------------------- every overlay


@pytest.mark.parametrize("overlay", TARGETS)
def test_everything_in_namespace_dailyrec(overlay: str) -> None:
    for obj in render(overlay):
        assert obj["kind"] != "Namespace", "the Profile controller owns the namespace"
        assert obj["metadata"].get("namespace") == NAMESPACE, (
            f"{obj['kind']}/{obj['metadata']['name']} not in {NAMESPACE}"
        )


@pytest.mark.parametrize("overlay", TARGETS)
def test_every_container_requests_cpu_and_memory(overlay: str) -> None:
    pods = list(all_pods(overlay))
    assert len(pods) >= 2  # mlflow + the training runtime
    for where, template in pods:
        spec = template["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            requests = (container.get("resources") or {}).get("requests") or {}
            assert {"cpu", "memory"} <= set(requests), f"{where} container {container['name']}"


@pytest.mark.parametrize("overlay", TARGETS)
def test_every_pod_runs_as_non_root_without_escalation(overlay: str) -> None:
    for where, template in all_pods(overlay):
        spec = template["spec"]
        containers = spec.get("initContainers", []) + spec["containers"]
        pod_level = (spec.get("securityContext") or {}).get("runAsNonRoot") is True
        assert pod_level or all(
            (c.get("securityContext") or {}).get("runAsNonRoot") is True for c in containers
        ), f"{where}: runAsNonRoot"
        for c in containers:
            ctx = c.get("securityContext") or {}
            assert ctx.get("allowPrivilegeEscalation") is False, f"{where} {c['name']}"
            assert ctx.get("privileged") is not True, f"{where} {c['name']}"


CREDENTIAL_ENV = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)
LITERAL_CREDENTIALS = [
    re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/:@'\"]+:[^\s/@'\"]+@"),  # scheme://user:password@
    re.compile(r"(password|passwd|pwd)\s*[=:]\s*[^\s$'\"]", re.IGNORECASE),
    re.compile(r"AWS_SECRET_ACCESS_KEY\s*[=:]\s*[^\s$'\"]"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # an AWS access key id
]


@pytest.mark.parametrize("overlay", TARGETS)
def test_no_secrets_in_the_manifests(overlay: str) -> None:
    assert not objects(overlay, "Secret"), "Secrets are created by the operator, never shipped"
    text = render_text(overlay)
    for pattern in LITERAL_CREDENTIALS:
        assert not pattern.search(text), f"literal credential? {pattern.search(text).group(0)!r}"
    for where, template in all_pods(overlay):
        for c in template["spec"]["containers"]:
            for env in c.get("env", []):
                if CREDENTIAL_ENV.search(env["name"]):
                    assert "value" not in env, f"{where}: {env['name']} has a literal value"


@pytest.mark.parametrize("overlay", TARGETS)
def test_the_roles_are_namespaced_and_the_runtime_reads_one_secret(overlay: str) -> None:
    """The pipeline Role's verbs are derived from the code in test_rbac_calls.py."""
    runtime = one(overlay, "Role", "dailyrec-kfp-runtime")
    assert role_triples(runtime) == KFP_RUNTIME_RULES
    secrets = next(r for r in runtime["rules"] if "secrets" in r["resources"])
    assert secrets["resourceNames"] == ["mlpipeline-minio-artifact"]  # never every Secret
    assert not objects(overlay, "ClusterRole") and not objects(overlay, "ClusterRoleBinding")


@pytest.mark.parametrize("overlay", TARGETS)
def test_the_roles_bind_the_pipelines_own_service_account_not_default_editor(overlay: str) -> None:
    """default-editor holds kubeflow-edit in a profile: a Role bound to it restricts nothing."""
    one(overlay, "ServiceAccount", "dailyrec-pipeline")
    for name in ("dailyrec-pipeline", "dailyrec-kfp-runtime"):
        binding = one(overlay, "RoleBinding", name)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": name,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "dailyrec-pipeline", "namespace": NAMESPACE}
        ]
    assert not any(
        s.get("name") == "default-editor"
        for b in objects(overlay, "RoleBinding")
        for s in b["subjects"]
    )


def _admin_namespace() -> dict:
    rendered = render("admin")
    (namespace,) = [o for o in rendered if o["kind"] == "Namespace"]
    assert [o["kind"] for o in rendered] == ["Namespace"]
    return namespace


def test_the_namespace_enforces_pod_security_in_an_admin_step() -> None:
    namespace = _admin_namespace()
    assert namespace["metadata"]["name"] == NAMESPACE
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_no_namespace_label_collides_with_the_profile_controllers() -> None:
    """The profile controller labels the namespace it creates (its defaults file and its
    service-mesh labels, tests/deploy/upstream/); our admin step sets other keys only, so a
    server-side apply under its own field manager never conflicts with the controller's."""
    upstream = yaml.safe_load(
        (
            Path(__file__).parent / "upstream" / "profile-controller-namespace-labels.yaml"
        ).read_text()
    )
    theirs = set(upstream["defaults"]) | set(upstream["service_mesh"])
    ours = set(_admin_namespace()["metadata"]["labels"])
    assert "app.kubernetes.io/part-of" in theirs and not ours & theirs, ours & theirs


@pytest.mark.parametrize("overlay", TARGETS)
def test_trainer_service_account_has_no_token(overlay: str) -> None:
    sa = one(overlay, "ServiceAccount", "dailyrec-trainer")
    assert sa["automountServiceAccountToken"] is False
    assert not [
        b
        for b in objects(overlay, "RoleBinding")
        if any(s["name"] == "dailyrec-trainer" for s in b["subjects"])
    ]


@pytest.mark.parametrize("overlay", TARGETS)
def test_mlflow_admits_only_its_clients_on_5000(overlay: str) -> None:
    policy = one(overlay, "NetworkPolicy", "mlflow")["spec"]
    pod_labels = one(overlay, "Deployment", "mlflow")["spec"]["template"]["metadata"]["labels"]
    selector = policy["podSelector"]["matchLabels"]
    assert selector and selector.items() <= pod_labels.items()
    assert "Ingress" in policy["policyTypes"]
    assert policy["ingress"], "an empty ingress list denies all; a missing one is intended?"
    for rule in policy["ingress"]:
        # an empty or missing "from" would admit every source
        assert rule.get("from"), "ingress rule without sources admits everyone"
        assert [peer for peer in rule["from"]] == [
            {"podSelector": {"matchLabels": {"dailyrec.io/mlflow-client": "true"}}},
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "dailyrec-trainer"}}},
        ]
        assert rule.get("ports") == [{"protocol": "TCP", "port": 5000}]


@pytest.mark.parametrize("overlay", TARGETS)
def test_mlflow_server_and_service(overlay: str) -> None:
    service = one(overlay, "Service", "mlflow")["spec"]
    assert [(p["port"], p["targetPort"]) for p in service["ports"]] == [(5000, "http")]
    deployment = one(overlay, "Deployment", "mlflow")
    assert (
        service["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    c = mlflow_container(overlay)
    assert c["image"].startswith("ghcr.io/mlflow/mlflow:v3.")
    assert c["command"] == [
        "mlflow",
        "server",
        "--app-name",
        "basic-auth",
        "--backend-store-uri",
        "$(MLFLOW_BACKEND_STORE_URI)",
        "--serve-artifacts",
        "--artifacts-destination",
        "$(MLFLOW_ARTIFACTS_DESTINATION)",
        "--host",
        "0.0.0.0",
        "--port",
        "5000",
    ]
    env_names = [e["name"] for e in c["env"]]
    # $(VAR) in command expands only from variables defined in env
    assert {"MLFLOW_BACKEND_STORE_URI", "MLFLOW_ARTIFACTS_DESTINATION"} <= set(env_names)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["path"] == "/health", probe
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    pod = deployment["spec"]["template"]["spec"]
    tmp = next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp)
    assert c["resources"]["limits"]["memory"]


@pytest.mark.parametrize("overlay", TARGETS)
def test_mlflow_admits_the_pipelines_tracking_host(overlay: str) -> None:
    """MLflow >= 3.5 answers 403 to Host headers it does not list: the pipeline's URI must be."""
    uri = pipeline_defaults()["tracking_uri"]
    assert uri == f"http://mlflow.{NAMESPACE}.svc.cluster.local:5000"
    config = one(overlay, "ConfigMap", "mlflow-config")["data"]
    assert uri.split("://", 1)[1] in config["allowed-hosts"].split(",")
    refs = {
        e["name"]: e["valueFrom"]["configMapKeyRef"]
        for e in mlflow_container(overlay)["env"]
        if "configMapKeyRef" in e.get("valueFrom", {})
    }
    assert refs["MLFLOW_SERVER_ALLOWED_HOSTS"] == {"name": "mlflow-config", "key": "allowed-hosts"}
    assert all(ref["key"] in config for ref in refs.values())


@pytest.mark.parametrize("overlay", TARGETS)
def test_training_runtime_structure(overlay: str) -> None:
    """What the TrainJob the train stage builds relies on (names, label, mounts, identity)."""
    runtime = one(overlay, "TrainingRuntime", RUNTIME)
    assert runtime["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert runtime["spec"]["mlPolicy"]["numNodes"] == 1
    assert "torch" in runtime["spec"]["mlPolicy"]
    job = runtime_job(overlay)
    assert job["template"]["metadata"]["labels"][ANCESTOR_LABEL] == "trainer"
    pod, container = runtime_pod(overlay), runtime_container(overlay)
    assert pod["serviceAccountName"] == "dailyrec-trainer"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    storage_root = pipeline_defaults()["storage_root"]
    assert storage_root == "/mnt/dailyrec"
    assert volumes[mounts[storage_root]]["persistentVolumeClaim"]["claimName"] == "dailyrec-data"
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["sizeLimit"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLFLOW_TRACKING_URI"] == pipeline_defaults()["tracking_uri"]
    # training restarts are the JobSet's (fresh pods resume from last.pt), a failed pod fails its Job
    assert runtime["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] >= 1
    assert job["template"]["spec"]["backoffLimit"] == 0


@pytest.mark.parametrize("overlay", TARGETS)
def test_pods_that_mount_the_storage_root_use_the_shared_claim(overlay: str) -> None:
    claims = {o["metadata"]["name"] for o in objects(overlay, "PersistentVolumeClaim")}
    for where, template in all_pods(overlay):
        for volume in template["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, where


# ----------------------------------------------------------------------------- base


def test_base_storage_and_secret_references() -> None:
    pvc = one("base", "PersistentVolumeClaim", "dailyrec-data")["spec"]
    assert pvc["accessModes"] == ["ReadWriteMany"]
    assert pvc["resources"]["requests"]["storage"] == "200Gi"
    assert "storageClassName" not in pvc
    c = mlflow_container("base")
    db = next(e for e in c["env"] if e["name"] == "MLFLOW_BACKEND_STORE_URI")
    assert db["valueFrom"]["secretKeyRef"] == {"name": "mlflow-db", "key": "uri"}
    assert c["envFrom"] == [{"secretRef": {"name": "mlflow-s3"}}]
    assert one("base", "ConfigMap", "mlflow-config")["data"]["artifacts-destination"].startswith(
        "s3://"
    )
    assert "nvidia.com/gpu" not in render_text("base")


# ----------------------------------------------------------------------------- local


def test_local_storage_is_single_node() -> None:
    pvcs = {p["metadata"]["name"]: p["spec"] for p in objects("local", "PersistentVolumeClaim")}
    assert pvcs["dailyrec-data"]["accessModes"] == ["ReadWriteOnce"]
    assert pvcs["dailyrec-data"]["resources"]["requests"]["storage"] == "20Gi"
    assert pvcs["dailyrec-data"]["storageClassName"] == "standard"
    assert pvcs["mlflow-store"]["storageClassName"] == "standard"


def test_local_has_no_gpu() -> None:
    assert "nvidia.com/gpu" not in render_text("local")
    assert "nodeSelector" not in runtime_pod("local")


def test_local_mlflow_needs_only_the_auth_secret() -> None:
    deployment = one("local", "Deployment", "mlflow")
    assert "secretkeyref" not in yaml.safe_dump(deployment).lower()
    assert "secretRef" not in mlflow_container("local") and [
        v["secret"]["secretName"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    ] == ["mlflow-auth-config"]
    c = mlflow_container("local")
    env = {e["name"]: e for e in c["env"]}
    assert env["MLFLOW_BACKEND_STORE_URI"] == {
        "name": "MLFLOW_BACKEND_STORE_URI",
        "value": "sqlite:////mlflow/mlflow.db",
    }
    artifacts = one("local", "ConfigMap", "mlflow-config")["data"]["artifacts-destination"]
    store = next(m for m in c["volumeMounts"] if m["mountPath"] == "/mlflow")
    assert artifacts.startswith("/mlflow/")
    assert env["MLFLOW_BACKEND_STORE_URI"]["value"].startswith("sqlite:////mlflow/")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes[store["name"]]["persistentVolumeClaim"]["claimName"] == "mlflow-store"
    # SQLite on a ReadWriteOnce volume: the old pod must be gone before the new one starts
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_local_requests_are_smaller() -> None:
    def gib(quantity: str) -> float:
        units = {"Mi": 1 / 1024, "Gi": 1, "Ti": 1024}
        return float(quantity[:-2]) * units[quantity[-2:]]

    for pick in (runtime_container, mlflow_container):
        local, base = (pick(o)["resources"]["requests"] for o in ("local", "base"))
        assert gib(local["memory"]) < gib(base["memory"]), pick.__name__


# ----------------------------------------------------------------------------- a100


def test_a100_runtime_takes_a_whole_gpu_node() -> None:
    pod, container = runtime_pod("a100"), runtime_container("a100")
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "8"
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS
    assert int(resources["requests"]["cpu"]) >= 64
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm["sizeLimit"] == "64Gi"
    # nothing else got a GPU
    assert render_text("a100").count("nvidia.com/gpu:") == 2


@pytest.mark.parametrize("overlay", ["a100", "local"])
def test_the_node_pool_is_read_from_the_rendered_overlay(overlay: str) -> None:
    """kube.types.placement (what TrainJobs, trials and the pipeline's cluster_target use) says
    exactly what kustomize renders for the training pods: one source, no second copy."""
    from kube.types import placement

    where, pod, container = placement(overlay), runtime_pod(overlay), runtime_container(overlay)
    assert where.node_selector == pod.get("nodeSelector", {})
    assert where.tolerations == pod.get("tolerations", [])
    requests = container["resources"]["requests"]
    assert (where.node.cpu, where.node.memory) == (str(requests["cpu"]), str(requests["memory"]))
    assert where.node.gpus == int(requests.get(where.accelerator or "-", 0))


def test_the_overlays_training_resources_apply_to_a_whole_node_job() -> None:
    """The runtime's resources are live: a TrainJob on all of a node's GPUs sets no resourcesPerNode
    (which would replace them); on one GPU it takes the node's share of the same numbers."""
    from pipelines.deploy import example_trainjob, image_refs

    refs = image_refs("reg.example/ml", "abc")
    whole = example_trainjob("a100", refs)["spec"]["trainer"]
    assert whole["numProcPerNode"] == 8 and "resourcesPerNode" not in whole
    requests = runtime_container("a100")["resources"]["requests"]
    one = example_trainjob("a100", refs, gpus=1)["spec"]["trainer"]["resourcesPerNode"]["limits"]
    assert one["cpu"] == str(int(requests["cpu"]) // 8) and one["nvidia.com/gpu"] == "1"


def test_the_cluster_targets_do_not_repeat_the_node_pool() -> None:
    from kube.types import CLUSTERS, PLACEMENT_KEYS, cluster_target

    for path in CLUSTERS.glob("*.json"):
        assert not set(json.loads(path.read_text())["trainjob"]) & set(PLACEMENT_KEYS), path
    with pytest.raises(ValueError, match=r"node_selector come from manifests/overlays/a100"):
        import unittest.mock as mock

        doc = {"trainjob": {"node_selector": {"pool": "x"}}}
        with mock.patch("pathlib.Path.read_text", return_value=json.dumps(doc)):
            cluster_target("a100")


def test_a100_node_pool_is_one_small_file() -> None:
    """The documented way to change the node pool: only nodepool.yaml sets the label."""

    def uncommented(path: Path) -> str:
        return "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())

    overlay = MANIFESTS / "overlays" / "a100"
    hits = sorted(
        p.name
        for p in overlay.glob("*.yaml")
        if re.search(r"nodeSelector|gke-accelerator", uncommented(p))
    )
    assert hits == ["nodepool.yaml"]


@pytest.mark.parametrize(
    ("overlay", "trainer"),
    [("a100", "REGISTRY/dailyrec-trainer:TAG"), ("local", "dailyrec-trainer:dev")],
)
def test_overlays_point_images_via_the_images_transformer(overlay: str, trainer: str) -> None:
    assert runtime_container(overlay)["image"] == trainer
    kustomization = yaml.safe_load(
        (MANIFESTS / "overlays" / overlay / "kustomization.yaml").read_text()
    )
    images = {i["name"]: i for i in kustomization["images"]}
    for name in ("ghcr.io/dailyrec/dailyrec-trainer", "ghcr.io/dailyrec/dailyrec-runtime"):
        assert {"newName", "newTag"} <= set(images[name]), name


def test_images_can_be_pinned_at_deploy_time(tmp_path: Path) -> None:
    """What a deploy step does without the kustomize binary: a throwaway wrapper overlay."""
    # kustomize refuses absolute paths to other kustomizations: a relative one
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(MANIFESTS / "overlays" / "a100", tmp_path)],
                "images": [
                    {
                        "name": "REGISTRY/dailyrec-trainer",
                        "newName": "europe-docker.pkg.dev/acme/ml/dailyrec-trainer",
                        "newTag": "0.1.0-abc123",
                    }
                ],
            }
        )
    )
    done = subprocess.run(
        [KUBECTL, "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    runtime = next(
        o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] == "TrainingRuntime"
    )
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    image = job["template"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "europe-docker.pkg.dev/acme/ml/dailyrec-trainer:0.1.0-abc123"
    assert "REGISTRY/" not in done.stdout


def job_failure(pod_policy: list[dict], pod: dict) -> tuple[str, str] | None:
    """(reason, message) of the Job failure the Kubernetes Job controller writes for a failed pod
    under ``pod_policy`` (pkg/controller/job/pod_failure_policy.go: the first matching FailJob rule;
    no match: the pod counts against backoffLimit 0, reason BackoffLimitExceeded)."""
    for index, rule in enumerate(pod_policy):
        if "onExitCodes" in rule:
            req = rule["onExitCodes"]
            code = pod["exit_code"]
            if code and req.get("containerName") in (None, "node") and code in req["values"]:
                return "PodFailurePolicy", (
                    f"Container node for pod ns/p failed with exit code {code} matching "
                    f"{rule['action']} rule at index {index}"
                )
        elif any(
            c["type"] in pod["conditions"] and c["status"] == "True"
            for c in rule.get("onPodConditions", [])
        ):
            return "PodFailurePolicy", (
                f"Pod ns/p has condition {next(iter(pod['conditions']))} matching "
                f"{rule['action']} rule at index {index}"
            )
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def jobset_action(rules: list[dict], reason: str, message: str) -> str:
    """JobSet's failure policy: the first rule whose reasons (empty: any) and message patterns
    (empty: any; regular expressions) match acts; none matches: RestartJobSet."""
    for rule in rules:
        reasons = rule.get("onJobFailureReasons") or []
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if (not reasons or reason in reasons) and (
            not patterns or any(re.search(p, message) for p in patterns)
        ):
            return rule["action"]
    return "RestartJobSet"


@pytest.mark.parametrize("overlay", TARGETS)
@pytest.mark.parametrize(
    ("pod", "action"),
    [
        # a spot preemption / eviction / drain: restarted without spending the restart budget
        (
            {"exit_code": 143, "conditions": {"DisruptionTarget"}},
            "RestartJobSetAndIgnoreMaxRestarts",
        ),
        (
            {"exit_code": None, "conditions": {"DisruptionTarget"}},
            "RestartJobSetAndIgnoreMaxRestarts",
        ),
        # a full disk stays full: fail at once
        ({"exit_code": 28, "conditions": set()}, "FailJobSet"),
        # a crashed rank (OOM, a bug, a lost peer): restarted, counted against maxRestarts
        ({"exit_code": 1, "conditions": set()}, "RestartJobSet"),
        ({"exit_code": 137, "conditions": set()}, "RestartJobSet"),
    ],
)
def test_the_runtime_restarts_disruptions_without_counting_them(overlay, pod, action) -> None:
    runtime = one(overlay, "TrainingRuntime", RUNTIME)
    rules = runtime["spec"]["template"]["spec"]["failurePolicy"]["rules"]
    policy = runtime_job(overlay)["template"]["spec"]["podFailurePolicy"]["rules"]
    assert jobset_action(rules, *job_failure(policy, pod)) == action


METADATA_ENDPOINTS = {
    "gke": {("169.254.169.254/32", 80), ("169.254.169.252/32", 988)},
    "eks": {("169.254.170.23/32", 80), ("fd00:ec2::23/128", 80)},
}
"""Where each cloud's workload identity hands pods their credentials: GKE's metadata server (and
its Dataplane V2 port), the EKS Pod Identity agent (IPv4 and IPv6)."""


def _egress_to(policies: list[dict]) -> dict[str, set[tuple[str, int]]]:
    """Per policy: the (CIDR, port) pairs its egress rules open."""
    return {
        p["metadata"]["name"]: {
            (peer["ipBlock"]["cidr"], port["port"])
            for rule in p["spec"].get("egress", [])
            for peer in rule.get("to", [])
            if "ipBlock" in peer
            for port in rule.get("ports", [])
        }
        for p in policies
    }


@pytest.mark.parametrize("overlay", ["a100", "local"])
@pytest.mark.parametrize("cloud", sorted(METADATA_ENDPOINTS))
def test_workload_identity_is_an_opt_in_per_cloud(overlay: str, cloud: str, tmp_path: Path) -> None:
    """By default no pod reaches a metadata endpoint (default-deny egress); an overlay that adds
    the cloud's component opens exactly that endpoint, for the object-store readers only."""
    closed = _egress_to(objects(overlay, "NetworkPolicy"))
    assert not any(pairs for pairs in closed.values()), closed
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "namespace": NAMESPACE,  # as an overlay of the user's sets it
                "resources": [os.path.relpath(MANIFESTS / "overlays" / overlay, tmp_path)],
                "components": [
                    os.path.relpath(
                        MANIFESTS / "components" / f"workload-identity-{cloud}", tmp_path
                    )
                ],
            }
        )
    )
    rendered = [o for o in yaml.safe_load_all(render_text(str(tmp_path))) if o]
    opened = _egress_to([o for o in rendered if o["kind"] == "NetworkPolicy"])
    added = {name: pairs for name, pairs in opened.items() if pairs}
    assert set(added) == {f"workload-identity-{cloud}-{g}" for g in ("tasks", "dask", "mlflow")}
    assert all(pairs == METADATA_ENDPOINTS[cloud] for pairs in added.values()), added
    for policy in (o for o in rendered if o["metadata"]["name"] in added):
        assert policy["metadata"]["namespace"] == NAMESPACE
        assert policy["spec"]["policyTypes"] == ["Egress"] and policy["spec"]["podSelector"]
        assert k8s_errors(policy) is None
