"""Security: no credentials in images or manifests, non-root images, least-privilege RBAC that
matches the code, safe checkpoint loading, MLflow reachable only from the namespace, and
user-given names that cannot escape the storage root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.common.paths import PathError, inside, safe_name
from tests.rbac import dask_kubernetes_calls, own_calls, role_triples
from tests.tools import KUBECTL_HOW, require_tool

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    *ROOT.glob("components/**/*.py"),
    *ROOT.glob("kube/**/*.py"),
    *ROOT.glob("pipelines/**/*.py"),
    *ROOT.glob("benchmarks/**/*.py"),
]
CREDENTIALS = [
    (re.compile(r"AKIA[0-9A-Z]{16}"), "AWS access key id"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "private key"),
    # the value on the same line: a YAML key ending its line ("secret:") opens a mapping
    (
        re.compile(
            r"(?i)(?:password|passwd|secret|token|aws_secret_access_key)[ \t]*[:=][ \t]*['\"]?"
            r"(?P<value>[A-Za-z0-9/+_-]{8,})"
        ),
        "literal secret value",
    ),
    (
        re.compile(r"(?i)postgres(?:ql)?(?:\+\w+)?://[^:\s/]+:(?P<value>[^@\s$]+)@"),
        "database URI with a password",
    ),
    (re.compile(r"ghp_[A-Za-z0-9]{30,}|xox[bp]-[A-Za-z0-9-]{10,}"), "API token"),
]

PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*|\$\(?\w+\)?|<[^>]+>")


def test_no_credentials_in_images_manifests_or_configs(fault_report):
    scanned, found = 0, []
    for folder in ("images", "manifests", "configs", "kube/clusters"):
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix in (".lock",):
                continue
            text = path.read_text(errors="replace")
            scanned += 1
            for pattern, kind in CREDENTIALS:
                for match in pattern.finditer(text):
                    if PLACEHOLDER.fullmatch(match.groupdict().get("value") or "-"):
                        continue  # documentation: ACCESS_KEY_ID, PASSWORD, ...
                    line = text[: match.start()].count("\n") + 1
                    found.append(f"{path.relative_to(ROOT)}:{line}: {kind}")
    assert scanned > 20 and not found, found
    fault_report(
        "security",
        f"credential scan of images/, manifests/, configs/ ({scanned} files)",
        "no keys, passwords, tokens or credentialed URIs; Secrets are only referenced",
    )


def test_images_run_as_non_root(fault_report):
    for dockerfile in sorted((ROOT / "images").glob("*/Dockerfile")):
        users = re.findall(r"^USER\s+(\S+)", dockerfile.read_text(), re.M)
        assert users and users[-1].split(":")[0] not in ("0", "root"), dockerfile
    fault_report(
        "security", "image users (images/*/Dockerfile)", "every image ends as numeric UID 10001"
    )


def test_role_grants_exactly_what_the_code_calls(fault_report):
    from tests.deploy.conftest import render

    require_tool("kubectl", KUBECTL_HOW)

    (role,) = [
        o
        for o in render("base")
        if o["kind"] == "Role" and o["metadata"]["name"] == "dailyrec-pipeline"
    ]
    granted = role_triples(role)
    calls = own_calls() | dask_kubernetes_calls()  # derived from the code (tests/rbac.py)
    assert calls, "no Kubernetes API calls found: the scan is broken"
    assert calls == granted, (
        f"not granted: {sorted(calls - granted)}; granted, never called: {sorted(granted - calls)}"
    )
    fault_report(
        "security",
        "the pipeline's Role vs the Kubernetes calls in the code",
        f"{len(calls)} calls found (ours and dask-kubernetes' KubeCluster's), exactly the grants",
    )


def test_every_torch_load_is_weights_only(fault_report):
    loads = []
    for path in SOURCES:
        for match in re.finditer(r"torch\.load\(([^)]*)\)", path.read_text()):
            loads.append((path, match.group(1)))
    assert loads and all("weights_only=True" in args for _, args in loads), loads
    fault_report(
        "security",
        f"torch.load calls ({len(loads)})",
        "all weights_only=True: no code runs from a checkpoint",
    )


def test_mlflow_is_reachable_only_by_its_clients(fault_report):
    from tests.deploy.conftest import render

    require_tool("kubectl", KUBECTL_HOW)

    for overlay in ("local", "a100"):
        policies = {
            o["metadata"]["name"]: o["spec"]
            for o in render(overlay)
            if o["kind"] == "NetworkPolicy"
        }
        (rule,) = policies["mlflow"]["ingress"]
        assert [p["podSelector"]["matchLabels"] for p in rule["from"]] == [
            {"dailyrec.io/mlflow-client": "true"},
            {"app.kubernetes.io/name": "dailyrec-trainer"},
        ]
    fault_report(
        "security",
        "who may reach the MLflow server (NetworkPolicy)",
        "only pipeline tasks labelled as MLflow clients and training pods, on 5000",
    )


def test_user_given_names_cannot_escape_the_storage_root(tmp_path, fault_report):
    for bad in ("../../etc", "a/b", "..", "", "x" * 200, "run id"):
        with pytest.raises(PathError, match="run_id"):
            safe_name(bad, "run_id")
    assert safe_name("20261129-0200.nightly_1", "run_id")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    assert inside(tmp_path / "root", tmp_path / "root" / "runs" / "x", "run folder")
    for escape in (
        tmp_path / "root" / ".." / "elsewhere",
        tmp_path / "root" / "link" / "x",
        Path("/etc"),
    ):
        with pytest.raises(PathError, match="outside the storage root"):
            inside(tmp_path / "root", escape, "run folder")
    from pipelines.local import main

    assert (
        main(
            ["--config", "configs/debug.json", "--root", str(tmp_path / "root"), "--run-id", "../x"]
        )
        == 2
    )
    fault_report(
        "security",
        "run ids like ../../etc, paths through symlinks out of the storage root",
        "refused with an error naming the value; nothing written outside the root",
    )


@pytest.mark.parametrize("link", ["runs/planted", "runs", "datasets"])
def test_a_symlinked_folder_is_refused_before_anything_is_written(
    link, tmp_path, capsys, fault_report
):
    from pipelines.local import main

    root, outside, raw = tmp_path / "root", tmp_path / "outside", tmp_path / "raw"
    (raw / "dt=2026-01-01").mkdir(parents=True)
    outside.mkdir()
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(outside)
    code = main(
        ["--config", "configs/debug.json", "--data", str(raw), "--root", str(root)]
        + ["--run-id", "planted"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "is outside the storage root" in err and err.count("\n") == 1, err
    assert list(outside.iterdir()) == []  # no lock, parameters or logs written through it
    fault_report(
        "security",
        f"make run with {link}/ a symlink out of the storage root",
        "refused before the first write (lock, parameters, logs), naming the folder",
    )


def findings(text: str) -> list[str]:
    return [
        kind
        for pattern, kind in CREDENTIALS
        for m in pattern.finditer(text)
        if not PLACEHOLDER.fullmatch(m.groupdict().get("value") or "-")
    ]


def test_the_credential_scan_catches_planted_secrets():
    assert findings("password: hunter2hunter2") and findings("AWS_SECRET_ACCESS_KEY=abcd1234efgh")
    assert findings("uri: postgresql+psycopg2://u:s3cretpw@db/mlflow") and findings(
        "AKIAABCDEFGHIJKLMNOP"
    )
    assert not findings("--from-literal=uri='postgresql+psycopg2://MLFLOW_USER:PASSWORD@HOST/DB'")
    assert not findings("secretKeyRef: {name: mlflow-s3, key: AWS_SECRET_ACCESS_KEY}")
    # a schema's "secret:" key opens a mapping; the next line is not its value
    assert not findings("secret:\n  description: secret information")
    assert findings('token: "abcdefgh12345678"') and findings("password =  hunter2hunter2")


def test_monitoring_reaches_only_what_it_needs(tmp_path, fault_report):
    """Prometheus (namespace monitoring) may scrape only the trainer pods' metrics port; only the exit
    handler may push to the Pushgateway, whose address comes from an optional ConfigMap."""
    import yaml

    from pipelines.compile import compile_pipeline
    from tests.deploy.conftest import render

    require_tool("kubectl", KUBECTL_HOW)
    monitoring_ns = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    for overlay in ("local", "a100"):
        objects = render(overlay)
        policies = {
            o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "NetworkPolicy"
        }
        (scrape,) = policies["trainer-metrics"]["ingress"]
        assert policies["trainer-metrics"]["podSelector"]["matchLabels"] == {
            "app.kubernetes.io/name": "dailyrec-trainer"
        }
        assert scrape["from"] == monitoring_ns and scrape["ports"] == [
            {"protocol": "TCP", "port": 9108}
        ]
        (push,) = policies["pushgateway-client"]["egress"]
        assert policies["pushgateway-client"]["podSelector"]["matchLabels"] == {
            "dailyrec.io/pushgateway-client": "true"
        }
        assert push["to"] == monitoring_ns and push["ports"] == [{"protocol": "TCP", "port": 9091}]
        (runtime,) = [o for o in objects if o["kind"] == "TrainingRuntime"]
        pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"
        ]
        (container,) = pod["spec"]["containers"]
        assert {"name": "DAILYREC_METRICS_PORT", "value": "9108"} in container["env"]
        assert {"name": "metrics", "containerPort": 9108} in container["ports"]
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9108"
    _, platform = yaml.safe_load_all(compile_pipeline(tmp_path / "p.yaml").read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    pushers = {
        name
        for name, config in executors.items()
        if config.get("podMetadata", {}).get("labels", {}).get("dailyrec.io/pushgateway-client")
        == "true"
    }
    assert pushers == {"exec-finalize"}
    (env,) = executors["exec-finalize"]["configMapAsEnv"]
    assert env["configMapName"] == "dailyrec-monitoring" and env["optional"] is True
    assert env["keyToEnv"] == [{"configMapKey": "pushgateway", "envVar": "DAILYREC_PUSHGATEWAY"}]
    fault_report(
        "security",
        "who monitoring may reach (NetworkPolicies, compiled pipeline)",
        "Prometheus from namespace monitoring scrapes only the trainers' port 9108; only the exit "
        "handler may reach the Pushgateway (9091), its address from an optional ConfigMap",
    )
