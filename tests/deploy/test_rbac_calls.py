"""The pipeline's Role holds exactly the Kubernetes calls its code makes, derived from the code
(tests/rbac.py): a call added to either side without its verb, or a verb left in the Role that
nothing calls, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.conftest import TARGETS, render
from tests.rbac import (
    KFP_RUNTIME_RULES,
    OWN_CLIENTS,
    dask_kubernetes_calls,
    own_calls,
    role_triples,
)

ROOT = Path(__file__).resolve().parents[2]


def one(overlay: str, kind: str, name: str) -> dict:
    (found,) = [o for o in render(overlay) if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_our_modules_that_call_the_api_are_all_scanned():
    calling = {
        str(p.relative_to(ROOT))
        for folder in ("kube", "components", "pipelines")
        for p in (ROOT / folder).rglob("*.py")
        if "_namespaced_" in p.read_text()
    }
    assert calling == set(OWN_CLIENTS)


def test_the_dask_scheduler_service_is_cluster_ip():
    """The reason the NodePort branch (listing nodes: a ClusterRole) is never reached."""
    from kube.dask import cluster_spec
    from kube.types import DaskTarget

    spec = cluster_spec("c", 2, DaskTarget(), run_id="r")
    assert spec["spec"]["scheduler"]["service"].get("type", "ClusterIP") == "ClusterIP"


def test_the_scan_sees_what_dask_kubernetes_does():
    """The derivation itself: the calls known from reading kubecluster.py are found."""
    calls = dask_kubernetes_calls()
    dask = "kubernetes.dask.org"
    assert {(dask, "daskclusters", "create"), (dask, "daskclusters", "delete")} <= calls
    assert ("", "pods", "list") in calls and ("", "pods/log", "get") in calls


@pytest.mark.parametrize("overlay", TARGETS)
def test_the_pipeline_role_is_exactly_the_calls_of_the_code(overlay):
    role = role_triples(one(overlay, "Role", "dailyrec-pipeline"))
    needed = own_calls() | dask_kubernetes_calls()
    assert role - needed == set(), "verbs nothing calls"
    assert needed - role == set(), "calls the Role does not allow"


@pytest.mark.parametrize("overlay", TARGETS)
def test_the_runtime_role_names_each_object_it_reads(overlay):
    """KFP's launcher reads one ConfigMap (kfp-launcher, one Get: kubeflow/pipelines
    backend/src/v2/config/env.go FromConfigMap) and one object-store Secret."""
    runtime = one(overlay, "Role", "dailyrec-kfp-runtime")
    assert role_triples(runtime) == KFP_RUNTIME_RULES
    named = {r["resources"][0]: r.get("resourceNames") for r in runtime["rules"]}
    assert named["configmaps"] == ["kfp-launcher"]
    assert named["secrets"] == ["mlpipeline-minio-artifact"]
