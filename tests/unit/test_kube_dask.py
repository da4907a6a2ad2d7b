"""Preprocessing on a Dask cluster in Kubernetes: the generated DaskCluster, validated offline."""

from __future__ import annotations

import json

from components.preprocess.config import PreprocessConfig
from components.preprocess.kube import (
    TARGET_ENV,
    DaskClusterTarget,
    cluster_spec,
    validate_cluster_spec,
)


def test_cluster_spec_is_sized_mounted_and_valid():
    target = DaskClusterTarget(worker_cpu="4", worker_memory="16Gi", pvc="shared", mount_path="/mnt/x")
    spec = cluster_spec("dailyrec-pre-7", 6, target)
    assert spec["kind"] == "DaskCluster" and spec["metadata"]["namespace"] == "dailyrec"
    assert spec["spec"]["worker"]["replicas"] == 6 and spec["spec"]["idleTimeout"] == 600
    for role in ("scheduler", "worker"):
        pod = spec["spec"][role]["spec"]
        assert pod["volumes"][0] == {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["volumeMounts"][0] == {"name": "data", "mountPath": "/mnt/x"}
        assert container["image"] == target.image
    worker = spec["spec"]["worker"]["spec"]["containers"][0]
    assert worker["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
    assert validate_cluster_spec(spec) == []


def test_validation_catches_bad_specs():
    spec = cluster_spec("x", 2, DaskClusterTarget())
    spec["spec"]["worker"]["replicas"] = "two"
    spec["spec"]["worker"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = 5
    problems = validate_cluster_spec(spec)
    assert any("replicas" in p for p in problems) and any(p.startswith("worker pod") for p in problems)


def test_target_from_the_pipeline_and_the_scheduler_name(monkeypatch):
    monkeypatch.setenv(TARGET_ENV, json.dumps({"namespace": "team", "worker_cpu": "8", "_comment": "x"}))
    assert DaskClusterTarget.from_env() == DaskClusterTarget(namespace="team", worker_cpu="8")
    assert PreprocessConfig(raw="r", out="o", scheduler="kubernetes", workers=4).scheduler == "kubernetes"
