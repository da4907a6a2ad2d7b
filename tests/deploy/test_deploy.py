"""make deploy: the dry run (everything it would apply or send, validated), and the KFP calls it makes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from unittest.mock import create_autospec

import pytest
import yaml

from pipelines.deploy import (
    DeployConfig,
    DeployError,
    Publisher,
    client_auth,
    content_version,
    deploy,
    image_refs,
    recurring_run_request,
    summary,
)
from pipelines.steps import RunTTL

ROOT = Path(__file__).resolve().parents[2]
needs_kubectl = pytest.mark.usefixtures("kubectl")
"""The dry run renders the kustomize overlays with kubectl (tests/deploy/conftest.py)."""


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("deploy")
    record = deploy(
        DeployConfig(
            env="a100", registry="reg.example/ml", tag="abc123", dry_run=True, out=str(out)
        )
    )
    return out, record


MLFLOW_DIGEST = f"ghcr.io/mlflow/mlflow@sha256:{'b' * 64}"


@pytest.fixture(scope="module")
def environment_dry_run(tmp_path_factory):
    """One dry run with every per-environment option set: settings, TTLs, a private registry's
    pull secret, another bucket's object-store Secret, the MLflow image by digest."""
    out = tmp_path_factory.mktemp("deploy-env")
    record = deploy(
        DeployConfig(
            env="a100",
            registry="private.example/ml",
            tag="abc123",
            dry_run=True,
            out=str(out),
            settings=(
                "raw_uri=s3://acme-events/clicks",
                "model_name=feed-ctr",
                "retention_days=30",
            ),
            ttl=RunTTL(3600, 14 * 86400),
            image_pull_secrets=("regcred",),
            object_store_secret="team-bucket-creds",
            mlflow_image=MLFLOW_DIGEST,
        )
    )
    objects = [o for o in yaml.safe_load_all((out / "manifests.yaml").read_text()) if o]
    return out, record, objects


@needs_kubectl
def test_dry_run_writes_and_validates_everything(dry_run):
    out, record = dry_run
    for name in (
        "manifests.yaml",
        "pipeline.yaml",
        "trainjob-example.yaml",
        "recurring-run.json",
        "upload.json",
        "deploy.json",
        "katib-experiment.yaml",
    ):
        assert (out / name).stat().st_size > 0, name
    assert record["validation"]["problems"] == []
    # every object was checked, the Trainer kinds against the CRDs shipped in manifests/schemas
    assert record["validation"]["unchecked"] == []
    assert record["validation"]["crd_schemas"] == [
        "ClusterTrainingRuntime",
        "TrainJob",
        "TrainingRuntime",
    ]
    assert [s["step"] for s in record["steps"]] == [
        "images",
        "manifests",
    ]  # nothing applied or sent
    assert record["steps"][0]["skipped"] and record["steps"][0]["command"][-3:] == [
        "reg.example/ml",
        "abc123",
        "--push",
    ]


@needs_kubectl
def test_dry_run_says_what_it_checked_and_what_a_deploy_would_do(dry_run):
    out, record = dry_run
    assert [s["step"] for s in record["plan"]] == ["apply", "id-key", "upload", "schedule"]
    lines = summary(record, str(out))
    assert lines[0].startswith("dry run: nothing sent to a cluster: dailyrec abc123, ENV=a100")
    checked = lines[1]
    objects = len([o for o in yaml.safe_load_all((out / "manifests.yaml").read_text()) if o])
    assert (
        f"checked offline: {objects} objects and an example TrainJob and a DaskCluster" in checked
    )
    assert "no problems" in checked and "'0 0 2 * * *'" in checked
    assert (
        "images: not built by this deploy (images/build.sh reg.example/ml abc123 --push"
        in (lines[2])
    )
    would = [line for line in lines if line.startswith("  would ")]
    assert [w.split()[1] for w in would] == ["apply", "create", "upload", "schedule"]
    assert "kubectl apply --server-side" in would[0] and "dailyrec-daily version abc123" in would[2]


@needs_kubectl
def test_deployment_settings_are_set_per_environment_and_shown(environment_dry_run):
    """SET bakes deployment settings (raw data in an object store, the model's name...) into the
    compiled pipeline, read back from it; the summary shows them and the workflow TTLs."""
    from pipelines.parameters import DEPLOYMENT
    from pipelines.steps import DEFAULT_TTL

    tmp_path, record, _ = environment_dry_run
    settings = record["settings"]
    assert settings["raw_uri"] == "s3://acme-events/clicks" and settings["model_name"] == "feed-ctr"
    assert settings["retention_days"] == 30 and set(settings) <= set(DEPLOYMENT)
    spec, platform = list(yaml.safe_load_all((tmp_path / "pipeline.yaml").read_text()))
    assert "raw_uri" not in spec["root"]["inputDefinitions"]["parameters"]  # not in the run form
    config = platform["platforms"]["kubernetes"]["pipelineConfig"]
    assert config["resourceTtlOnSuccess"] == 3600 and config["resourceTtlOnFailure"] == 14 * 86400
    lines = summary(record, str(tmp_path))
    assert any('raw_uri="s3://acme-events/clicks"' in line for line in lines)
    assert any("kept 1 h after success, 14 days after failure" in line for line in lines)
    assert any("set its Service Account to dailyrec-pipeline" in line for line in lines)
    assert DEFAULT_TTL.failure_s >= 7 * 86400 > DEFAULT_TTL.success_s


@pytest.mark.parametrize(
    "setting, error",
    [
        ("window_days=3", "SET window_days: a run's parameter, not a deployment setting"),
        ("moon=1", "SET moon: a run's parameter, not a deployment setting"),
        ("retention_days=soon", "retention_days"),
        ("raw_uri", "SET: "),
    ],
)
def test_a_setting_that_is_not_a_deployment_setting_is_refused(setting, error):
    with pytest.raises(DeployError, match=re.escape(error)):
        DeployConfig(env="a100", registry="r", dry_run=True, settings=(setting,))


def test_a_credential_in_a_setting_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(Exception, match="credential"):
        deploy(
            DeployConfig(
                env="a100",
                registry="reg.example/ml",
                tag="abc123",
                dry_run=True,
                out=str(tmp_path),
                settings=("raw_uri=s3://bucket/events?X-Amz-Signature=abcdef0123456789",),
            )
        )
    assert not (tmp_path / "pipeline.yaml").exists()


def test_a_deploys_summary_says_what_it_did():
    record = {
        "dry_run": False,
        "env": "a100",
        "version": "v1",
        "validation": {"problems": [], "unchecked": ["Profile"], "crd_schemas": ["TrainJob"]},
        "checked": {"objects": 3, "examples": ["TrainJob"], "pipeline": "p.yaml", "schedule": "s"},
        "steps": [
            {
                "step": "images",
                "command": ["images/build.sh", "r", "v1", "--push"],
                "pinned": "digest",
                "refs": {"runtime": "r/dailyrec-runtime@sha256:" + "a" * 64},
            },
            {"step": "apply", "command": ["/x/kubectl", "apply", "-f", "m.yaml"]},
            {"step": "id-key", "created": False},
            {"step": "upload", "pipeline_id": "p", "version_id": "pv", "created": True},
            {"step": "schedule", "recurring_run_id": "rr", "cron": "0 0 2 * * *"},
        ],
    }
    lines = summary(record, "out")
    assert lines[0] == "deployed: dailyrec v1, ENV=a100; files in out/ (deploy.json lists them)"
    assert lines[2] == "  not validated offline: Profile"
    assert lines[3:] == [
        "  built and pushed the images (images/build.sh r v1 --push); pinned by digest: "
        "r/dailyrec-runtime@sha256:" + "a" * 64,
        "  applied: kubectl apply -f m.yaml",
        "  Secret dailyrec-id-key: kept as it was",
        "  pipeline version pv uploaded",
        "  recurring run rr at '0 0 2 * * *' (UTC)",
    ]
    assert not [line for line in lines if "would" in line]


@needs_kubectl
def test_dry_run_pins_the_pushed_images_everywhere(dry_run):
    out, _ = dry_run
    refs = image_refs("reg.example/ml", "abc123")
    images = {
        c["image"]
        for obj in yaml.safe_load_all((out / "manifests.yaml").read_text())
        if obj
        for c in _containers(obj)
    }
    dailyrec = {i for i in images if "dailyrec" in i}
    assert dailyrec and dailyrec <= set(refs.values())
    spec, _platform = yaml.safe_load_all((out / "pipeline.yaml").read_text())
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {
        refs["runtime"]
    }
    # deployment settings are constants of the uploaded pipeline, not run parameters
    assert not {"launcher", "cluster_target"} & set(spec["root"]["inputDefinitions"]["parameters"])
    baked = spec["root"]["dag"]["tasks"]["finalize"]["inputs"]["parameters"]
    assert baked["launcher"]["runtimeValue"]["constant"] == "trainjob"
    target = json.loads(baked["cluster_target"]["runtimeValue"]["constant"])
    assert (
        target["trainjob"]["image"] == refs["trainer"]
        and target["trainjob"]["accelerator"] == "nvidia.com/gpu"
    )
    assert target["dask"]["image"] == refs["runtime"]  # the Dask workers too, not a placeholder
    job = yaml.safe_load((out / "trainjob-example.yaml").read_text())
    assert job["spec"]["trainer"]["image"] == refs["trainer"]
    # a whole-node plan: no resourcesPerNode, the overlay's TrainingRuntime resources apply
    assert (
        "resourcesPerNode" not in job["spec"]["trainer"]
        and job["spec"]["trainer"]["numProcPerNode"] == 8
    )
    wrapper = yaml.safe_load((out / "kustomize" / "kustomization.yaml").read_text())
    assert {
        "name": "REGISTRY/dailyrec-trainer",
        "newName": "reg.example/ml/dailyrec-trainer",
        "newTag": "abc123",
    } in wrapper["images"]


@needs_kubectl
def test_dry_run_recurring_run_request(dry_run):
    out, _ = dry_run
    request = json.loads((out / "recurring-run.json").read_text())
    assert (
        request["cron_expression"] == "0 0 2 * * *" and len(request["cron_expression"].split()) == 6
    )
    assert request["max_concurrency"] == 1 and request["no_catchup"] is True
    assert request["job_name"] == "dailyrec-daily" and request["pipeline_version"] == "abc123"


def _containers(node):
    if isinstance(node, dict):
        if "image" in node and "name" in node:
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def test_trigger_refuses_a_deployment_setting_before_it_calls_the_cluster(capsys):
    from pipelines.deploy import main

    # port 9 answers nothing: the refusal comes first
    assert main(["trigger", "--host", "http://127.0.0.1:9", "--set", "tracking_uri=x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "deploy: error: --set tracking_uri: a deployment setting, baked into the deployed "
        "pipeline (not a run parameter): change it with make deploy SET='tracking_uri=...'"
    )


def test_config_errors_are_clear():
    with pytest.raises(DeployError, match="no manifests/overlays/moon"):
        DeployConfig(env="moon", registry="r", dry_run=True)
    with pytest.raises(DeployError, match="KFP_HOST is required"):
        DeployConfig(env="a100", registry="r")
    with pytest.raises(DeployError, match="REGISTRY is required"):
        DeployConfig(env="a100", registry="", dry_run=True)
    with pytest.raises(DeployError, match="6 fields"):
        DeployConfig(env="a100", registry="r", dry_run=True, schedule="0 2 * * *")


def recording_client(versions=(), recurring=()):
    """kfp.Client as the real class specifies it (no server here): an unknown method, a wrong
    argument name or count fails as it would against the real client; answers are the API's
    own response models."""
    import kfp
    import kfp_server_api as api

    client = create_autospec(kfp.Client, instance=True)
    client.get_pipeline_id.return_value = "pid"
    client.list_pipeline_versions.return_value = api.V2beta1ListPipelineVersionsResponse(
        pipeline_versions=[
            api.V2beta1PipelineVersion(display_name=v, pipeline_version_id=f"vid-{v}")
            for v in versions
        ]
    )
    client.upload_pipeline_version.return_value = api.V2beta1PipelineVersion(
        pipeline_version_id="vid-new"
    )
    client.get_experiment.return_value = api.V2beta1Experiment(experiment_id="eid")
    client.list_recurring_runs.return_value = api.V2beta1ListRecurringRunsResponse(
        recurring_runs=[
            api.V2beta1RecurringRun(display_name=n, recurring_run_id=f"rid-{n}") for n in recurring
        ]
    )
    client.create_recurring_run.return_value = api.V2beta1RecurringRun(
        recurring_run_id="rid-created"
    )
    client.run_pipeline.return_value = api.V2beta1Run(run_id="run-1")
    return client


def calls(client, name: str) -> list[tuple[tuple, dict]]:
    return [(args, kwargs) for called, args, kwargs in client.method_calls if called == name]


def names(client) -> list[str]:
    return [called for called, _, _ in client.method_calls]


def test_the_recording_client_refuses_what_kfp_client_would():
    """Negative control: the stand-in really checks names and arguments against kfp.Client."""
    client = recording_client()
    with pytest.raises(AttributeError, match="upload_pipeline_versions"):
        client.upload_pipeline_versions("p.yaml", "v1")
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'version_name'"):
        client.upload_pipeline_version("p.yaml", "v1", version_name="v1")
    with pytest.raises(TypeError, match="missing a required argument: 'job_name'"):
        client.run_pipeline("eid", params={})


def test_publisher_uploads_a_version_once(tmp_path):
    fresh = recording_client(versions=["old"])
    assert Publisher(fresh).pipeline_version(tmp_path / "p.yaml", "abc") == ("pid", "vid-new", True)
    ((args, kwargs),) = calls(fresh, "upload_pipeline_version")
    assert args == (str(tmp_path / "p.yaml"),)
    assert kwargs == {"pipeline_version_name": "abc", "pipeline_id": "pid"}
    again = recording_client(versions=["abc"])
    assert Publisher(again).pipeline_version(tmp_path / "p.yaml", "abc") == (
        "pid",
        "vid-abc",
        False,
    )
    assert "upload_pipeline_version" not in names(again)


def test_publisher_replaces_the_recurring_run(tmp_path):
    client = recording_client(recurring=["dailyrec-daily", "someone-elses"])
    rid = Publisher(client).replace_recurring_run(
        recurring_run_request("abc", "0 0 2 * * *"), "pid", "vid"
    )
    assert rid == "rid-created"
    assert calls(client, "delete_recurring_run") == [(("rid-dailyrec-daily",), {})]
    ((_, kwargs),) = calls(client, "create_recurring_run")
    assert kwargs["cron_expression"] == "0 0 2 * * *" and kwargs["max_concurrency"] == 1
    assert (
        kwargs["no_catchup"] is True
        and kwargs["pipeline_id"] == "pid"
        and kwargs["version_id"] == "vid"
    )
    assert kwargs["experiment_id"] == "eid" and kwargs["job_name"] == "dailyrec-daily"
    assert kwargs["service_account"] == "dailyrec-pipeline"  # never the profile's default-editor
    # the old schedule is disabled, the new one created, only then the old one deleted
    order = [n for n in names(client) if n.endswith("recurring_run")]
    assert order == [
        "disable_recurring_run",
        "create_recurring_run",
        "delete_recurring_run",
    ]


def test_a_failed_create_keeps_the_old_schedule(tmp_path):
    import kfp_server_api as api

    client = recording_client(recurring=["dailyrec-daily"])
    client.create_recurring_run.side_effect = api.ApiException(status=500, reason="boom")
    with pytest.raises(api.ApiException):
        Publisher(client).replace_recurring_run(
            recurring_run_request("abc", "0 0 2 * * *"), "pid", "vid"
        )
    assert calls(client, "enable_recurring_run") == [(("rid-dailyrec-daily",), {})]
    assert "delete_recurring_run" not in names(client)


def test_trigger_starts_the_newest_version_with_parameters():
    client = recording_client(versions=["newest", "older"])
    assert Publisher(client).trigger({"run_date": "2026-01-14"}) == "run-1"
    ((args, kwargs),) = calls(client, "run_pipeline")
    assert args[0] == "eid" and args[1].startswith("dailyrec-daily-")
    assert kwargs == {
        "params": {"run_date": "2026-01-14"},
        "pipeline_id": "pid",
        "version_id": "vid-newest",
        "service_account": "dailyrec-pipeline",
    }


def test_an_uncommitted_tree_is_versioned_by_its_content():
    base = content_version("abc123def456", b"pipeline", b"diff")
    assert base.startswith("abc123def456-") and base != "abc123def456-dirty"
    assert (
        content_version("abc123def456", b"pipeline", b"diff") == base
    )  # same content: same version
    assert content_version("abc123def456", b"pipeline", b"diff2") != base  # an edit: a new one
    assert content_version("abc123def456", b"pipeline2", b"diff") != base


def test_kfp_authentication_for_multi_user_kubeflow(tmp_path):
    """A bearer token from the environment, else the projected service-account token in a cluster."""
    import kfp
    from kfp.client.set_volume_credentials import ServiceAccountTokenVolumeCredentials

    assert client_auth({"KF_PIPELINES_TOKEN": "t0ken"}) == {
        "namespace": "dailyrec",
        "existing_token": "t0ken",
    }
    token = tmp_path / "token"
    token.write_text("sa-token")
    auth = client_auth({"KF_PIPELINES_SA_TOKEN_PATH": str(token), "KFP_NAMESPACE": "team-a"})
    assert auth["namespace"] == "team-a" and isinstance(
        auth["credentials"], ServiceAccountTokenVolumeCredentials
    )
    assert client_auth({"KF_PIPELINES_SA_TOKEN_PATH": str(tmp_path / "absent")}) == {
        "namespace": "dailyrec"
    }
    # the keywords are kfp.Client's own (a typo would be refused here, as by the real constructor)
    import inspect

    inspect.signature(kfp.Client).bind(host="https://kfp", **auth)


@needs_kubectl
def _kfp_pull_secret_entry(secret: str, tmp_path: Path) -> list:
    """What kfp.kubernetes.set_image_pull_secrets writes for one task (the SDK itself)."""
    from kfp import compiler, dsl, kubernetes

    @dsl.container_component
    def one():
        return dsl.ContainerSpec(image="busybox", command=["true"])

    @dsl.pipeline(name="one")
    def pipeline():
        kubernetes.set_image_pull_secrets(one(), [secret])

    compiler.Compiler().compile(pipeline, str(tmp_path / "one.yaml"))
    _, platform = yaml.safe_load_all((tmp_path / "one.yaml").read_text())
    (entry,) = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"].values()
    return entry["imagePullSecret"]


def test_a_private_registrys_pull_secret_reaches_every_pod(environment_dry_run, tmp_path):
    """Every pod dailyrec runs uses one of its ServiceAccounts (the pipeline's tasks through the
    recurring run's service_account), and each account carries the pull secret."""
    out, _, objects = environment_dry_run
    accounts = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ServiceAccount"}
    assert set(accounts) == {
        "dailyrec-pipeline",
        "dailyrec-trainer",
        "dailyrec-dask",
        "dailyrec-mlflow",
    }
    for name, account in accounts.items():
        assert account["imagePullSecrets"] == [{"name": "regcred"}], name

    def pod_accounts(node):
        if isinstance(node, dict):
            if "containers" in node:
                yield node.get("serviceAccountName")
            for value in node.values():
                yield from pod_accounts(value)
        elif isinstance(node, list):
            for value in node:
                yield from pod_accounts(value)

    used = [
        *pod_accounts(objects),
        *pod_accounts(yaml.safe_load((out / "daskcluster-example.yaml").read_text())),
    ]
    assert used and set(used) <= set(accounts), used
    assert json.loads((out / "recurring-run.json").read_text())["service_account"] in accounts
    # a run from the Kubeflow UI runs as the form's account (default-editor unless changed):
    # the compiled pipeline carries the secret on every task, as kfp.kubernetes writes it
    spec, platform = list(yaml.safe_load_all((out / "pipeline.yaml").read_text()))
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(spec["deploymentSpec"]["executors"]) <= set(executors)
    reference = _kfp_pull_secret_entry("regcred", tmp_path)
    for name in spec["deploymentSpec"]["executors"]:
        assert executors[name]["imagePullSecret"] == reference, name
    with pytest.raises(ValueError, match="IMAGE_PULL_SECRETS: 'Reg Cred'"):
        DeployConfig(env="a100", registry="r", dry_run=True, image_pull_secrets=("Reg Cred",))


def test_deploy_creates_the_id_secret_once_and_never_passes_it_as_an_argument():
    import subprocess

    from kube.types import ID_KEY_SECRET
    from pipelines.deploy import ensure_id_key

    calls, existing = [], []

    def run_command(cmd, **kwargs):
        calls.append((cmd, kwargs.get("input")))
        if "get" in cmd:
            out = f"secret/{ID_KEY_SECRET}\n" if existing else ""
            return subprocess.CompletedProcess(cmd, 0, out, "")
        existing.append(json.loads(kwargs["input"]))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    assert ensure_id_key(run_command) is True
    (get, _), (create, given) = calls
    secret = json.loads(given)
    assert secret["metadata"] == {
        "name": ID_KEY_SECRET,
        "namespace": "dailyrec",
        "labels": {"app.kubernetes.io/part-of": "dailyrec"},
    }
    value = secret["stringData"]["key"]
    assert len(value) >= 32 and not any(value in part for part in [*get, *create])
    assert ensure_id_key(run_command) is False and len(calls) == 3  # found: left as it is


DIGESTS = {"runtime": "sha256:" + "a" * 64, "trainer": "sha256:" + "b" * 64}


def _pushed(refs: dict[str, str]) -> str:
    """What images/build.sh --push prints: each image by the digest its push reported."""
    return "".join(f"{ref.rsplit(':', 1)[0]}@{DIGESTS[key]}\n" for key, ref in refs.items())


def test_the_pushed_digests_are_read_back_and_a_missing_one_is_refused():
    import subprocess as sp

    from pipelines.deploy import _images, pinned_refs

    refs = image_refs("reg.example/ml", "abc123")
    pinned = pinned_refs(_pushed(refs), refs)
    assert pinned == {
        "runtime": f"reg.example/ml/dailyrec-runtime@{DIGESTS['runtime']}",
        "trainer": f"reg.example/ml/dailyrec-trainer@{DIGESTS['trainer']}",
    }
    config = DeployConfig(env="a100", registry="reg.example/ml", host="http://kfp", tag="abc123")

    def build(cmd, **kwargs):
        return sp.CompletedProcess(cmd, 0, stdout=_pushed(refs), stderr="")

    step, got = _images(config, "abc123", refs, build)
    assert got == pinned and step["pinned"] == "digest"
    with pytest.raises(DeployError, match="no digest for reg.example/ml/dailyrec-trainer:abc123"):
        pinned_refs(_pushed(refs).splitlines()[0], refs)


@needs_kubectl
def test_digest_pinned_images_reach_every_object_and_the_pipeline(tmp_path):
    from pipelines.deploy import compile_for, pinned_refs, render_manifests

    refs = image_refs("reg.example/ml", "abc123")
    pinned = pinned_refs(_pushed(refs), refs)
    objects = render_manifests("a100", pinned, tmp_path)
    images = {c["image"] for obj in objects for c in _containers(obj) if "dailyrec" in c["image"]}
    assert images and images <= set(pinned.values())
    package = compile_for("a100", pinned, tmp_path / "pipeline.yaml")
    spec, _ = yaml.safe_load_all(package.read_text())
    executors = spec["deploymentSpec"]["executors"].values()
    assert {e["container"]["image"] for e in executors} == {pinned["runtime"]}


def test_a_pipeline_root_in_another_bucket_names_its_secret_and_only_that_one(
    environment_dry_run,
):
    """KFP's launcher reads the Secret the kfp-launcher ConfigMap names for the pipeline root
    (kubeflow/pipelines backend/src/v2/config/env.go): the runtime Role follows the setting,
    still one Secret by name, and the summary says which."""
    out, record, objects = environment_dry_run
    (runtime,) = [
        o
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"] == "dailyrec-kfp-runtime"
    ]
    secrets = [r for r in runtime["rules"] if "secrets" in r["resources"]]
    assert secrets == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["team-bucket-creds"],
            "verbs": ["get"],
        }
    ]
    assert "object store Secret the pipeline may read: team-bucket-creds" in "\n".join(
        summary(record, str(out))
    )
    with pytest.raises(ValueError, match="OBJECT_STORE_SECRET: 'Team Creds'"):
        DeployConfig(env="a100", registry="r", dry_run=True, object_store_secret="Team Creds")


def test_the_mlflow_server_image_is_pinned_by_digest_and_the_plan_says_how(
    dry_run, environment_dry_run, monkeypatch
):
    """Given by digest it reaches the rendered Deployment; otherwise a real deploy reads the
    tag's digest from a pull (the engine's RepoDigests), and a dry run says it stays a tag."""
    import subprocess

    from pipelines import containers
    from pipelines.deploy import mlflow_manifest_image, resolve_digest

    tag = mlflow_manifest_image()
    name = tag.rsplit(":", 1)[0]
    digest = MLFLOW_DIGEST
    assert digest.startswith(f"{name}@")
    out, record, objects = environment_dry_run
    (server,) = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "mlflow"
    ]
    assert server["spec"]["template"]["spec"]["containers"][0]["image"] == digest
    lines = "\n".join(summary(record, str(out)))
    assert f"MLflow server image: {digest}, pinned by digest (MLFLOW_IMAGE)" in lines
    plain_out, plain = dry_run
    assert f"MLflow server image: {tag}, by tag" in "\n".join(summary(plain, str(plain_out)))

    calls = []

    def engine_says(argv, **_):
        calls.append(argv)
        answer = json.dumps([f"other.example/x@sha256:{'c' * 64}", digest])
        return subprocess.CompletedProcess(argv, 0, answer if "inspect" in argv else "", "")

    monkeypatch.setattr(containers, "engine", lambda: "podman")
    assert resolve_digest(tag, engine_says) == digest
    assert calls[0] == ["podman", "pull", "-q", tag]
    monkeypatch.setattr(containers, "engine", lambda: None)
    assert resolve_digest(tag, engine_says) is None
    with pytest.raises(ValueError, match="MLFLOW_IMAGE='ghcr.io/mlflow/mlflow:latest'"):
        DeployConfig(
            env="a100", registry="r", dry_run=True, mlflow_image="ghcr.io/mlflow/mlflow:latest"
        )
