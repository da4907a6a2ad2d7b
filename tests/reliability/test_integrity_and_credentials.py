"""Nothing from the artifact store runs unchecked; credentials never leave the environment; the
cluster objects deny by default. Real MLflow (SQLite), real files tampered with as an attacker
with write access to the artifact store would."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from components.common.tracking import (
    CredentialError,
    TrackingError,
    check_no_credentials,
    connect,
    redact,
)
from components.train.launch import LaunchSpec
from tests.evaluations import forced_evaluation
from tests.small_run import local_run, small_world

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sealed(tiny_dataset, tmp_path_factory):
    """A registry with one blessed champion (an untrained debug model), and where its files lie."""
    from components.common.tracking import sqlite_uri
    from components.register.config import RegisterConfig
    from components.register.stage import register
    from tests.checkpoints import untrained_checkpoint

    root = tmp_path_factory.mktemp("sealed")
    checkpoint = untrained_checkpoint(root / "model.pt", tiny_dataset, seed=1)
    forced_evaluation(root / "decision")
    uri = sqlite_uri(root / "runs")
    result = register(
        RegisterConfig(
            checkpoint=str(checkpoint),
            metrics=str(root / "decision" / "metrics.json"),
            decision=str(root / "decision" / "decision.json"),
            model_name="ctr",
            tracking_uri=uri,
            out=str(root),
            data=str(tiny_dataset),
        )
    )
    (model_dir,) = {p.parent for p in (root / "runs" / "artifacts").rglob("MLmodel")}
    return {"uri": uri, "dir": model_dir, "result": result, "data": tiny_dataset, "root": root}


TAMPER = {
    "model_code.py": lambda d: d / "model_code.py",
    "copied components/": lambda d: d / "code" / "components" / "__init__.py",
    "copied components/, a new module": lambda d: d / "code" / "components" / "evil.py",
    "weights": lambda d: d / "artifacts" / "model.pt",
}


@pytest.mark.integration
@pytest.mark.parametrize("what", list(TAMPER))
def test_a_tampered_model_is_refused_everywhere_it_is_loaded(
    sealed, what, tmp_path, capsys, fault_report
):
    from components.common.integrity import DIGEST_TAG, IntegrityError, manifest, manifest_digest
    from components.common.registry import champion_checkpoint
    from components.datagen import generate
    from components.datagen.generator import extended
    from components.evaluate.decision import GateRule
    from components.evaluate.stage import EvaluateConfig, evaluate
    from components.score import __main__ as score

    registration = json.loads((sealed["root"] / "registration.json").read_text())
    assert registration["integrity"][DIGEST_TAG] == manifest_digest(manifest(sealed["dir"]))
    assert registration["integrity"]["manifest"] == manifest(sealed["dir"])
    target = TAMPER[what](sealed["dir"])
    original = target.read_bytes() if target.exists() else None
    marker = tmp_path / "pwned"
    payload = f"\nimport pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n".encode()
    target.write_bytes((original or b"") + (payload if target.suffix == ".py" else b"\0"))
    try:
        client = connect(sealed["uri"])
        with pytest.raises(
            IntegrityError,
            match=r"models:/ctr/1: its files differ from what was registered "
            rf"\((changed|added): {target.relative_to(sealed['dir'])}\); "
            r"refusing to load it",
        ):
            champion_checkpoint(client, "ctr", str(tmp_path / "warm"))
        result = evaluate(
            EvaluateConfig(
                data=str(sealed["data"]),
                checkpoint=str(sealed["root"] / "model.pt"),
                out=str(tmp_path / "eval"),
                model_name="ctr",
                tracking_uri=sealed["uri"],
                rule=GateRule(min_auc=0.0),
            )
        )
        assert result.decision.champion_status == "unusable" and not result.decision.blessed
        assert "IntegrityError" in result.metrics.champion["reason"]
        # the day after the version's window (a day of its own is refused before any load)
        raw = tmp_path / "raw"
        shutil.copytree(sealed["data"].parent / "raw", raw)
        config = extended(raw, 1)
        generate(dataclasses.replace(config, out=raw))
        day = (config.start_date + dt.timedelta(days=config.days - 1)).isoformat()
        assert (
            score.main(
                [
                    "--raw",
                    str(raw),
                    "--date",
                    day,
                    "--out",
                    str(tmp_path / "scores.parquet"),
                    "--model",
                    "models:/ctr@champion",
                    "--tracking-uri",
                    sealed["uri"],
                ]
            )
            == 1
        )
        # MLflow's own background threads (left by other tests' runs) may log here too: the
        # stage's part is one line, no traceback
        ours = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("20")]
        assert len(ours) == 1 and ours[0].startswith(
            "score: error: models:/ctr/1: its files differ"
        )
        assert not marker.exists()  # the planted code never ran
    finally:
        target.write_bytes(original) if original is not None else target.unlink()
    assert (
        champion_checkpoint(connect(sealed["uri"]), "ctr", str(tmp_path / "ok"))[0] == 1
    )  # restored: loads
    fault_report(
        "security",
        f"the champion's {what} changed in the artifact store",
        "warm start, evaluate and the scoring client refuse it (digest of the files vs the version's "
        "tag); the planted code never runs",
    )


@pytest.mark.integration
def test_evaluate_never_executes_the_models_code(sealed, tmp_path, fault_report):
    """Even a correctly sealed champion is scored from its weights only (weights_only): its code is not run."""
    import mlflow.pyfunc

    from components.evaluate.decision import GateRule
    from components.evaluate.stage import EvaluateConfig, evaluate

    calls = []
    original = mlflow.pyfunc.load_model
    mlflow.pyfunc.load_model = lambda *a, **k: calls.append(a) or original(*a, **k)
    try:
        result = evaluate(
            EvaluateConfig(
                data=str(sealed["data"]),
                checkpoint=str(sealed["root"] / "model.pt"),
                out=str(tmp_path / "eval"),
                model_name="ctr",
                tracking_uri=sealed["uri"],
                rule=GateRule(min_auc=0.0),
            )
        )
    finally:
        mlflow.pyfunc.load_model = original
    assert result.decision.champion_status == "scored" and calls == []
    # same weights as the candidate: the same scores, so the delta is exactly 0
    assert result.metrics.comparison["delta"] == 0.0


def test_credentials_in_uris_are_refused_and_redacted(fault_report):
    for uri in (
        "http://alice:s3cr3t@mlflow:5000",
        "https://tok3n@mlflow.example.com",
        "http://mlflow:5000/?token=s3cr3t",
        "https://host/x?X-Amz-Signature=abcd",
    ):
        with pytest.raises(CredentialError, match=r"carries credentials.*MLFLOW_TRACKING_USERNAME"):
            check_no_credentials(uri)
        for secret in ("s3cr3t", "tok3n", "abcd"):
            assert secret not in redact(uri) and secret not in redact(f"View run at {uri}/#/runs/1")
        with pytest.raises(TrackingError, match=r"carries credentials") as caught:
            connect(uri)
        assert "s3cr3t" not in str(caught.value) and "tok3n" not in str(caught.value)
        with pytest.raises(
            CredentialError, match="tracking_uri"
        ):  # never on torchrun's command line
            LaunchSpec.of(data="d", out="o", tracking_uri=uri)
    assert check_no_credentials("http://mlflow.dailyrec.svc.cluster.local:5000")
    fault_report(
        "security",
        "tracking URIs with user:password@, a token user or a token in the query",
        "refused (parameters, connect, launcher) with the URI redacted and the environment variables named",
    )


@pytest.mark.slow
@pytest.mark.integration
def test_a_run_writes_and_prints_no_credential(tmp_path, fault_report):
    """The whole local pipeline with credentials in the environment (as the Secret provides them) and a
    refused attempt with a credentialed URI: grep every file the runs wrote and everything they printed."""
    secret = "Zq8-credential-sentinel-41"
    raw = small_world(tmp_path / "raw")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MLFLOW_TRACKING_USERNAME": "pipeline",
        "MLFLOW_TRACKING_PASSWORD": secret,
    }
    base = local_run(
        raw, tmp_path / "store", window_days=4, history_days=1, min_auc=0.0, max_epochs=1
    )
    refused = subprocess.run(
        [*base, "--set", f"tracking_uri=http://pipeline:{secret}@mlflow:5000"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "carries credentials" in refused.stderr
    done = subprocess.run(base, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    leaks = [
        f"{p}"
        for p in (tmp_path / "store").rglob("*")
        if p.is_file() and secret.encode() in p.read_bytes()
    ]
    printed = [
        name
        for name, text in (
            ("stdout", done.stdout + refused.stdout),
            ("stderr", done.stderr + refused.stderr),
        )
        if secret in text
    ]
    files = sum(1 for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert files > 50 and not leaks and not printed, (leaks, printed)
    fault_report(
        "security",
        "credential-leak grep: a whole local run with MLflow credentials in the environment "
        "and one with a credentialed tracking URI",
        f"{files} files written, stdout and stderr: the password appears nowhere",
    )


def test_dask_pods_are_locked_down(fault_report):
    from kube.dask import cluster_spec
    from kube.types import DaskTarget as DaskClusterTarget
    from kube.validate import validate_cluster_spec

    spec = cluster_spec("dailyrec-pre-1", 2, DaskClusterTarget())
    for role in ("scheduler", "worker"):
        pod = spec["spec"][role]["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert (
                sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
            )
            assert sc["readOnlyRootFilesystem"] is True and sc["privileged"] is False
    assert validate_cluster_spec(spec) == []
    fault_report(
        "security",
        "Dask scheduler and worker pods",
        "no API token, non-root, seccomp RuntimeDefault, all capabilities dropped, read-only root; "
        "port 8786 reachable only from the preprocess task and Dask pods (NetworkPolicy dask)",
    )


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl not installed: renders the manifests"
)
@pytest.mark.parametrize("overlay", ["local", "a100"])
def test_default_deny_and_a_policy_for_every_component(overlay, fault_report):
    from tests.deploy.conftest import render

    objects = render(overlay)
    policies = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "NetworkPolicy"}
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    selected = {name: p["podSelector"] for name, p in policies.items()}
    assert selected["mlflow"] == {"matchLabels": {"app.kubernetes.io/name": "mlflow"}}
    assert selected["trainer"] == {"matchLabels": {"app.kubernetes.io/name": "dailyrec-trainer"}}
    assert selected["pipeline-tasks"]["matchExpressions"][0]["key"] == "dailyrec.io/task"
    assert selected["dask"]["matchExpressions"][0]["key"] == "dask.org/component"
    for name, policy in policies.items():
        for rule in policy.get("ingress", []):
            assert rule.get("from"), f"{name}: an ingress rule without sources admits everyone"
        for rule in policy.get("egress", []):
            assert rule.get("to") or rule.get("ports"), f"{name}: an egress rule open to everything"
    # the labels the policies select on are the ones the pipeline and the runtime set
    from kube.tasks import MLFLOW_CLIENT_LABEL, TASK_LABEL

    assert TASK_LABEL == "dailyrec.io/task" and MLFLOW_CLIENT_LABEL == "dailyrec.io/mlflow-client"
    fault_report(
        "security",
        f"NetworkPolicies ({overlay})",
        f"default deny plus {len(policies) - 1} explicit policies: MLflow, trainer, pipeline tasks, "
        "MLflow clients, KFP's workflow pods, Dask, DNS",
    )


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl not installed: renders the manifests"
)
def test_secrets_reach_only_what_needs_them(tmp_path, fault_report):
    import yaml

    from tests.deploy.conftest import render

    def secrets_of(node, found):
        if isinstance(node, dict):
            for key in ("secretKeyRef", "secretRef"):
                if key in node:
                    found.add(node[key]["name"])
            if "secret" in node and isinstance(node["secret"], dict):
                found.add(node["secret"]["secretName"])
            for value in node.values():
                secrets_of(value, found)
        elif isinstance(node, list):
            for value in node:
                secrets_of(value, found)
        return found

    uses = {f"{o['kind']}/{o['metadata']['name']}": secrets_of(o, set()) for o in render("base")}
    assert {k: v for k, v in uses.items() if v} == {
        "Deployment/mlflow": {"mlflow-db", "mlflow-s3", "mlflow-auth-config"},
        "TrainingRuntime/dailyrec-torch": {"mlflow-trainer-auth"},
    }
    roles = {o["metadata"]["name"]: o for o in render("base") if o["kind"] == "Role"}
    assert not any("secrets" in rule["resources"] for rule in roles["dailyrec-pipeline"]["rules"])
    # KFP's launcher reads the object store's Secret, by name, and no other
    (secrets,) = [r for r in roles["dailyrec-kfp-runtime"]["rules"] if "secrets" in r["resources"]]
    assert secrets["resourceNames"] == ["mlpipeline-minio-artifact"] and secrets["verbs"] == ["get"]
    from kfp import compiler

    from pipelines.daily import daily

    compiler.Compiler().compile(daily, str(tmp_path / "daily.yaml"))
    executors = list(yaml.safe_load_all((tmp_path / "daily.yaml").read_text()))[1]["platforms"][
        "kubernetes"
    ]["deploymentSpec"]["executors"]
    with_secret = {name for name, spec in executors.items() if spec.get("secretAsEnv")}
    assert with_secret == {
        "exec-preprocess-op",
        "exec-train-op",
        "exec-evaluate-op",
        "exec-register-op",
        "exec-finalize",
    }
    # the id secret: required (a pod without it must not hash under the public key), preprocess only
    (id_key,) = executors.pop("exec-preprocess-op")["secretAsEnv"]
    assert id_key["secretName"] == "dailyrec-id-key" and not id_key.get("optional")
    assert [e["envVar"] for e in id_key["keyToEnv"]] == ["DAILYREC_ID_KEY"]
    with_secret.discard("exec-preprocess-op")
    # the exit handler reads the registry (retention keeps the champion's lineage): the account only
    (account,) = executors.pop("exec-finalize")["secretAsEnv"]
    assert account["secretName"] == "mlflow-pipeline-auth"
    for name in with_secret - {"exec-finalize"}:
        account, *signing = executors[name]["secretAsEnv"]
        assert account["secretName"] == "mlflow-pipeline-auth" and not account["optional"]
        assert {e["envVar"] for e in account["keyToEnv"]} == {
            "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD",
        }
        # the private key only where models are signed; the public key wherever they are loaded
        if name == "exec-register-op":
            (key,) = signing
            assert key["secretName"] == "dailyrec-model-signing" and key["optional"]
            assert [e["envVar"] for e in key["keyToEnv"]] == ["DAILYREC_MODEL_SIGNING_KEY"]
        else:
            assert signing == [], name
        (verify,) = executors[name]["configMapAsEnv"][-1:]
        assert verify["configMapName"] == "dailyrec-model-verify" and verify["optional"]
        assert [e["envVar"] for e in verify["keyToEnv"]] == ["DAILYREC_MODEL_VERIFY_KEY"]
    fault_report(
        "security",
        "who can read which Secret",
        "MLflow: its database, bucket and auth settings; training pods: their own MLflow account; "
        "only the train, evaluate and register tasks (and the exit handler, read-only use): the pipeline's MLflow account; only register the private signing key, the model loaders its public key; only preprocess (and its Dask workers) the id secret; no Role of ours grants secrets",
    )


@pytest.mark.integration
def test_a_signing_key_protects_against_registry_writes_too(
    tiny_dataset, tmp_path, monkeypatch, fault_report
):
    from mlflow import MlflowClient

    from components.common import signing
    from components.common.integrity import (
        DIGEST_TAG,
        SIGNATURE_TAG,
        IntegrityError,
        manifest,
        manifest_digest,
    )
    from components.common.registry import champion_checkpoint
    from components.common.tracking import sqlite_uri
    from components.register.config import RegisterConfig
    from components.register.stage import register
    from tests.checkpoints import untrained_checkpoint

    private, public = signing.write_pair(tmp_path / "keys")
    other_private, other_public = signing.write_pair(tmp_path / "other")
    # the register task holds the private key; it alone signs
    monkeypatch.setenv(signing.SIGNING_KEY_ENV, private.read_text())
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", tiny_dataset, seed=1)
    forced_evaluation(tmp_path)
    uri = sqlite_uri(tmp_path / "runs")
    register(
        RegisterConfig(
            checkpoint=str(checkpoint),
            metrics=str(tmp_path / "metrics.json"),
            decision=str(tmp_path / "decision.json"),
            model_name="ctr",
            tracking_uri=uri,
            data=str(tiny_dataset),
        )
    )
    client = MlflowClient(uri, registry_uri=uri)
    tag = client.get_model_version("ctr", "1").tags[SIGNATURE_TAG]
    assert tag.startswith("ed25519:") and private.read_text().strip() not in tag
    # a loader holds only the public key (no private key anywhere in its environment)
    monkeypatch.delenv(signing.SIGNING_KEY_ENV)
    monkeypatch.setenv(signing.VERIFY_KEY_ENV, public.read_text())
    assert champion_checkpoint(connect(uri), "ctr", str(tmp_path / "a"))[0] == 1
    # someone who can write the artifact store AND the registry: new files, the digest tag to
    # match, and a signature made with the only key a loader has -- the public one -- or their own
    (model_dir,) = {p.parent for p in (tmp_path / "runs" / "artifacts").rglob("MLmodel")}
    with open(model_dir / "model_code.py", "a") as fh:
        fh.write("\nprint('planted')\n")
    digest = manifest_digest(manifest(model_dir))
    client.set_model_version_tag("ctr", "1", DIGEST_TAG, digest)
    forged = signing.sign(
        digest, signing.private_key({signing.SIGNING_KEY_ENV: other_private.read_text()})
    )
    for signature in (tag, forged, "hmac:" + public.read_text().strip()):
        client.set_model_version_tag("ctr", "1", SIGNATURE_TAG, signature)
        with pytest.raises(
            IntegrityError,
            match=rf"models:/ctr/1: its {SIGNATURE_TAG} tag is missing or does not match the digest",
        ):
            champion_checkpoint(connect(uri), "ctr", str(tmp_path / "b"))
    other_id = signing.key_id(
        signing.public_key({signing.VERIFY_KEY_ENV: other_public.read_text()})
    )
    client.set_model_version_tag("ctr", "1", SIGNATURE_TAG, forged)
    with pytest.raises(IntegrityError, match=f"signed by key {other_id}"):
        champion_checkpoint(connect(uri), "ctr", str(tmp_path / "c"))
    # a key that is no Ed25519 key is refused by name
    monkeypatch.setenv(signing.VERIFY_KEY_ENV, "not-a-key")
    with pytest.raises(signing.SigningKeyError, match=signing.VERIFY_KEY_ENV):
        champion_checkpoint(connect(uri), "ctr", str(tmp_path / "d"))
    fault_report(
        "security",
        "model files, their digest tag and the signature tag all rewritten (artifact store and "
        "registry written), the forger holding what a loader holds or a key of their own",
        "refused: the Ed25519 signature does not verify under the deployment's public key (the "
        "private key lives in the register task alone); the refusal names the signing key",
    )
