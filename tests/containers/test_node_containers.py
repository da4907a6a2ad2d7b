"""The TrainJob the launcher renders, executed as node containers of the (CPU) trainer image.

Each node container gets what a TrainJob's pod gets: the trainer image, the rendered command and
args, the rendered environment, the shared volume at its fixed mount path, the image's non-root
user, and the torch plugin's ``PET_*`` variables (:func:`pipelines.containers.trainjob_node_env`).
The nodes share the host's network, as pods share the cluster's, and train over gloo.
"""

from __future__ import annotations

import shutil
import time
import uuid

import pytest

from components.common.plan import TrainPlan, write_plan
from components.common.train_summary import TrainSummary
from components.train.backend import LaunchSpec
from components.train.checkpoint import LAST
from kube.trainjob import build_trainjob
from kube.types import MOUNT_PATH, TrainJobTarget
from pipelines.containers import Containers
from tests.nodes import free_port
from tests.trainer_endpoint import trainer_endpoint

pytestmark = pytest.mark.images
PLAN = {"model": "debug", "micro_batch": 256, "num_workers": 0, "lr": 3e-3, "eval_batch": 2048}


def shared_volume(tmp_path, tiny_dataset):
    """The storage root every node mounts: the dataset under datasets/, writable by the image's
    user as the cluster's volume is for the pods' fsGroup."""
    root = tmp_path / "volume"
    shutil.copytree(tiny_dataset, root / "datasets" / "tiny")
    (root / "runs" / "r").mkdir(parents=True)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    return root


def rendered_job(root, image: str, plan: TrainPlan) -> dict:
    """The TrainJob the launcher renders for ``plan`` on the shared volume (plan written there)."""
    write_plan(root / "runs" / "r" / "plan.json", plan)
    (root / "runs" / "r" / "plan.json").chmod(0o666)
    spec = LaunchSpec.of(
        data=f"{MOUNT_PATH}/datasets/tiny",
        out=f"{MOUNT_PATH}/runs/r/train",
        plan=f"{MOUNT_PATH}/runs/r/plan.json",
    )
    return build_trainjob(spec, plan, TrainJobTarget(image=image))


def run_nodes(engine: str, image: str, job: dict, root) -> None:
    """Every node started, all waited for; fails with their logs unless all exit 0."""
    nodes = Containers(engine, str(root), MOUNT_PATH)
    try:
        codes = nodes.wait(nodes.trainjob_nodes(job, free_port(), image, uuid.uuid4().hex[:8]))
    finally:
        logs = nodes.close()
    assert codes == [0] * len(codes), logs


def summary_of(root) -> TrainSummary:
    return TrainSummary.read(root / "runs" / "r" / "train")


def test_the_rendered_trainjob_trains_across_two_node_containers(images, tiny_dataset, tmp_path):
    engine, refs = images
    root = shared_volume(tmp_path, tiny_dataset)
    plan = TrainPlan(**PLAN, max_epochs=2, nnodes=2, nproc_per_node=1)
    run_nodes(engine, refs["trainer"], rendered_job(root, refs["trainer"], plan), root)
    summary = summary_of(root)
    assert summary.world_size == 2 and summary.epochs_run == 2
    assert summary.best_val_auc > 0.55


def test_two_node_containers_report_progress_in_the_trainjobs_status(
    images, tiny_dataset, tmp_path
):
    """With the endpoint Trainer's controller injects (URL, CA, token: here served on this
    machine, the files on the shared volume), rank 0 of the rendered TrainJob posts its progress,
    time left and metrics; the bodies are what the Trainer 2.3 CRD accepts."""
    from kube.validate import crd_schemas, validate_objects

    engine, refs = images
    root = shared_volume(tmp_path, tiny_dataset)
    plan = TrainPlan(**PLAN, max_epochs=2, nnodes=2, nproc_per_node=1)
    job = rendered_job(root, refs["trainer"], plan)
    with trainer_endpoint(root / "controller", f"{MOUNT_PATH}/controller") as (env, _, received):
        (root / "controller").chmod(0o755)
        job["spec"]["trainer"].setdefault("env", []).extend(
            {"name": k, "value": v} for k, v in env.items()
        )
        run_nodes(engine, refs["trainer"], job, root)
    statuses = [body["trainerStatus"] for _, body in received]
    assert statuses and statuses[-1]["progressPercentage"] == 100, statuses
    progress = [s["progressPercentage"] for s in statuses]
    assert progress == sorted(progress)
    assert statuses[-1]["estimatedRemainingSeconds"] == 0
    assert {"loss", "val_auc", "epoch"} <= {m["name"] for m in statuses[-1]["metrics"]}
    assert {auth for auth, _ in received} == {"Bearer first-token"}
    schemas = crd_schemas()
    for status in statuses:
        assert validate_objects([job | {"status": {"trainerStatus": status}}], schemas) == ([], [])


def test_a_node_killed_mid_epoch_resumes_when_the_jobset_restarts_all_nodes(
    images, tiny_dataset, tmp_path
):
    """A node container dies mid-epoch (a preempted node); its peer fails on the lost connection,
    and, as the JobSet does, all nodes start again with the same command: they resume from the
    last checkpoint on the shared volume and finish every epoch once."""
    engine, refs = images
    root = shared_volume(tmp_path, tiny_dataset)
    plan = TrainPlan(
        **{**PLAN, "micro_batch": 64}, max_epochs=3, nnodes=2, nproc_per_node=1,
        checkpoint_every_steps=10,
    )  # fmt: skip
    job = rendered_job(root, refs["trainer"], plan)
    nodes = Containers(engine, str(root), MOUNT_PATH)
    try:
        names = nodes.trainjob_nodes(job, free_port(), refs["trainer"], uuid.uuid4().hex[:8])
        deadline = time.monotonic() + 300
        while not (root / "runs" / "r" / "train" / LAST).exists():
            assert time.monotonic() < deadline, "no mid-epoch checkpoint in 300s"
            time.sleep(0.2)
        nodes.kill(names[1])
        first = nodes.wait(names, timeout=300)
    finally:
        logs = nodes.close()
    assert first[1] != 0 and first[0] != 0, logs  # the peer of a lost node fails too
    run_nodes(engine, refs["trainer"], job, root)  # all nodes again, as the JobSet restarts them
    summary = summary_of(root)
    assert summary.resumed_from and summary.world_size == 2
    assert [r["epoch"] for r in summary.history] == [0, 1, 2]  # each epoch exactly once
