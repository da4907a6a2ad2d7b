"""Preprocessing on a Dask cluster in Kubernetes: the generated DaskCluster, validated offline."""

from __future__ import annotations

import json

import pytest

from kube.client import run_identity
from kube.dask import (
    check_space,
    cluster_name,
    cluster_spec,
    estimate_dataset_bytes,
    scratch_limit,
    worker_threads,
)
from kube.types import DaskTarget, cluster_target
from kube.validate import validate_cluster_spec

OWNER = {
    "apiVersion": "v1",
    "kind": "Pod",
    "name": "preprocess-abc",
    "uid": "u-1",
    "blockOwnerDeletion": False,
    "controller": False,
}


def test_cluster_spec_is_sized_mounted_owned_and_valid():
    target = DaskTarget(worker_cpu="4", worker_memory="16Gi", image="reg/dailyrec-runtime:abc")
    spec = cluster_spec(
        cluster_name("run-7"), 6, target, run_id="run-7", owner=OWNER, scratch="8Gi"
    )
    assert spec["kind"] == "DaskCluster" and spec["metadata"]["namespace"] == "dailyrec"
    assert spec["metadata"]["labels"]["dailyrec.io/run"] == "run-7"
    assert spec["metadata"]["ownerReferences"] == [OWNER]
    assert spec["spec"]["worker"]["replicas"] == 6 and spec["spec"]["idleTimeout"] == 600
    for role in ("scheduler", "worker"):
        pod = spec["spec"][role]["spec"]
        assert pod["volumes"][0] == {
            "name": "data",
            "persistentVolumeClaim": {"claimName": "dailyrec-data"},
        }
        assert pod["volumes"][1] == {"name": "scratch", "emptyDir": {"sizeLimit": "8Gi"}}
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["volumeMounts"][0] == {"name": "data", "mountPath": "/mnt/dailyrec"}
        assert container["image"] == "reg/dailyrec-runtime:abc"
    worker = spec["spec"]["worker"]["spec"]["containers"][0]
    assert worker["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
    assert validate_cluster_spec(spec) == []
    # the workers hash ids: the deployment's secret from its Secret, the scheduler never sees it
    from components.common.hashing import KEY_ENV

    (key,) = [e for e in worker["env"] if e["name"] == KEY_ENV]
    assert key == {
        "name": KEY_ENV,
        "valueFrom": {"secretKeyRef": {"name": "dailyrec-id-key", "key": "key"}},
    }
    scheduler = spec["spec"]["scheduler"]["spec"]["containers"][0]
    assert KEY_ENV not in {e["name"] for e in scheduler.get("env", [])}


def test_validation_catches_bad_specs():
    spec = cluster_spec("x", 2, DaskTarget())
    spec["spec"]["worker"]["replicas"] = "two"
    spec["spec"]["worker"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = 5
    problems = validate_cluster_spec(spec)
    assert any("replicas" in p for p in problems) and any(
        p.startswith("worker pod") for p in problems
    )


def test_clusters_are_named_by_run_and_never_shared():
    names = {cluster_name(r) for r in ("run-1", "run-2", "Run 1", "a" * 200, "")}
    assert len(names) == 5 and all(len(n) <= 63 and n[0].isalpha() for n in names)
    assert cluster_name("run-1") == cluster_name("run-1") and cluster_name("run-1").startswith(
        "dailyrec-pre-run-1-"
    )


def test_run_identity_from_the_kfp_pod():
    env = {"KFP_RUN_ID": "r-9", "KFP_POD_NAME": "preprocess-abc", "KFP_POD_UID": "u-1"}
    assert run_identity(env) == ("r-9", OWNER)
    run, owner = run_identity({})
    assert run.startswith("pid-") and owner is None


def test_the_deployed_dask_workers_run_the_pinned_image():
    images = {"runtime": "reg/dailyrec-runtime:abc", "trainer": "reg/dailyrec-trainer:abc"}
    doc = json.loads(cluster_target("a100", images))
    assert DaskTarget(**doc["dask"]).image == "reg/dailyrec-runtime:abc"
    assert doc["trainjob"]["image"] == "reg/dailyrec-trainer:abc"


def test_volume_estimate_and_early_failure_with_the_numbers():
    # the sample: 9.6 MB of Parquet made a 439 MB dataset (46x); the estimate covers it
    assert 439e6 <= estimate_dataset_bytes({"parquet": 9_596_936}) <= 1.1 * 439e6 * 1.03
    assert estimate_dataset_bytes({"csv": 10**12}) == 20 * 10**9 * 320  # 1 TB of CSV: 6.4 TB
    assert estimate_dataset_bytes({"csv": 10**9}, seq_len=40) > estimate_dataset_bytes(
        {"csv": 10**9}
    )
    assert check_space({"csv": 10**9}, 10**12) == 6_400_000_000
    with pytest.raises(
        ValueError,
        match=r"/mnt/dailyrec: the dataset needs ~596.0 GiB \(93.1 GiB of input at "
        r"~320 bytes per row\) but only 200.0 GiB are free",
    ):
        check_space({"csv": 10**11}, 200 * 2**30, where="/mnt/dailyrec")
    assert scratch_limit(10**9, 8) == "2Gi" and scratch_limit(100 * 2**30, 10) == "20Gi"


def test_the_pods_run_the_dask_cli_with_the_workers_threads_and_memory():
    """distributed >= 2026.6 installs only ``dask`` (no dask-scheduler / dask-worker), and a worker
    without --nthreads runs one thread per node CPU inside its own memory limit."""
    spec = cluster_spec("x", 3, DaskTarget(worker_cpu="3500m", worker_memory="12Gi"))
    scheduler = spec["spec"]["scheduler"]["spec"]["containers"][0]
    worker = spec["spec"]["worker"]["spec"]["containers"][0]
    assert scheduler["command"] == ["dask", "scheduler"] and "--host" in scheduler["args"]
    assert worker["command"] == ["dask", "worker"]
    args = worker["args"]
    assert args[args.index("--nthreads") + 1] == "3"
    assert args[args.index("--memory-limit") + 1] == str(12 * 2**30)
    assert not any(a.startswith("dask-") for c in (scheduler, worker) for a in c["args"])
    assert worker_threads("500m") == 1 and worker_threads("8") == 8


def test_the_pods_opt_out_of_istio_and_run_as_their_own_account():
    spec = cluster_spec("x", 2, DaskTarget())
    for role in ("scheduler", "worker"):
        meta = spec["spec"][role]["metadata"]
        assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
        assert meta["labels"]["sidecar.istio.io/inject"] == "false"
        pod = spec["spec"][role]["spec"]
        assert pod["serviceAccountName"] == "dailyrec-dask"
        assert pod["automountServiceAccountToken"] is False
    assert validate_cluster_spec(spec) == []


def test_a_scheduler_that_never_becomes_ready_fails_in_bounded_time_naming_the_sidecar():
    """dask-kubernetes' wait_for_scheduler loops for ever on a Running pod that is not Ready (an
    Istio sidecar cut off from istiod): the start is bounded and says which container waits."""
    import threading
    import time
    from unittest.mock import create_autospec

    from kubernetes import client as k8s

    from kube.client import DaskStartError, _not_ready, start_bounded

    core = create_autospec(k8s.CoreV1Api, instance=True)
    core.list_namespaced_pod.return_value = k8s.V1PodList(
        items=[
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name="x-scheduler-1"),
                status=k8s.V1PodStatus(
                    phase="Running",
                    conditions=[k8s.V1PodCondition(type="Ready", status="False")],
                    container_statuses=[
                        k8s.V1ContainerStatus(
                            name=n, ready=n == "scheduler", image="i", image_id="", restart_count=0
                        )
                        for n in ("scheduler", "istio-proxy")
                    ],
                ),
            )
        ]
    )
    target = DaskTarget(start_timeout_s=1)
    hang = threading.Event()
    started = time.monotonic()
    with pytest.raises(DaskStartError) as caught:
        start_bounded(hang.wait, 0.3, lambda: _not_ready("dailyrec", "x", target, core=core))
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "pod x-scheduler-1 Running: containers not ready: istio-proxy" in message
    assert "sidecar.istio.io/inject=false" in message and "was not ready after 1s" in message
    hang.set()
    assert start_bounded(lambda: "cluster", 5, lambda: "unused") == "cluster"
    with pytest.raises(ZeroDivisionError):  # the start's own error, unchanged
        start_bounded(lambda: 1 / 0, 5, lambda: "unused")
