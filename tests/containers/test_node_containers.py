"""The TrainJob the launcher renders, executed as node containers of the (CPU) trainer image.

Each node container gets what a TrainJob's pod gets: the trainer image, the rendered command and
args, the rendered environment, the shared volume at its fixed mount path, the image's non-root
user, and the torch plugin's ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``,
``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` (trainer v2.3.0
``pkg/runtime/framework/plugins/torch/torch.go``). The nodes share the host's network, as pods
share the cluster's, and train over gloo.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from components.common.plan import TrainPlan, write_plan
from components.train.backend import LaunchSpec
from kube.trainjob import build_trainjob
from kube.types import MOUNT_PATH, TrainJobTarget
from tests.nodes import free_port, node_env

pytestmark = pytest.mark.images
PLAN = {"model": "debug", "micro_batch": 256, "num_workers": 0, "lr": 3e-3, "eval_batch": 2048}


def shared_volume(tmp_path, tiny_dataset):
    """The storage root every node mounts: the dataset under datasets/, group- and world-writable
    as the cluster's volume is for the pods' fsGroup."""
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


def start_nodes(engine: str, image: str, job: dict, root, port: int) -> list[str]:
    trainer = job["spec"]["trainer"]
    names = []
    for rank in range(trainer["numNodes"]):
        env = node_env(job, rank, port)
        name = f"dailyrec-node-{rank}-{uuid.uuid4().hex[:8]}"
        command = [
            engine, "run", "-d", "--name", name, "--network", "host",
            "-v", f"{root}:{MOUNT_PATH}",
            *(arg for k, v in sorted(env.items()) for arg in ("-e", f"{k}={v}")),
            "--entrypoint", trainer["command"][0],
            image, *trainer["command"][1:], *trainer["args"],
        ]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
        names.append(name)
    return names


def wait_all(engine: str, names: list[str], timeout: float = 900) -> list[int]:
    codes = []
    for name in names:
        done = subprocess.run(
            [engine, "wait", name], capture_output=True, text=True, timeout=timeout, check=False
        )
        codes.append(int(done.stdout.strip().splitlines()[-1]))
    return codes


def run_nodes(engine: str, image: str, job: dict, root) -> list[int]:
    """Start every node, wait for all of them; exit codes, with the logs when one failed."""
    names = start_nodes(engine, image, job, root, free_port())
    try:
        codes = wait_all(engine, names)
    finally:
        logs = logs_and_remove(engine, names)
    assert codes == [0] * len(names), logs
    return codes


def logs_and_remove(engine: str, names: list[str]) -> str:
    text = []
    for name in names:
        logs = subprocess.run([engine, "logs", name], capture_output=True, text=True, check=False)
        text.append(f"--- {name}\n{(logs.stdout + logs.stderr)[-3000:]}")
        subprocess.run([engine, "rm", "-f", name], capture_output=True, check=False)
    return "\n".join(text)


def test_the_rendered_trainjob_trains_across_two_node_containers(images, tiny_dataset, tmp_path):
    engine, refs = images
    root = shared_volume(tmp_path, tiny_dataset)
    plan = TrainPlan(**PLAN, max_epochs=2, nnodes=2, nproc_per_node=1)
    job = rendered_job(root, refs["trainer"], plan)
    run_nodes(engine, refs["trainer"], job, root)
    summary = json.loads((root / "runs" / "r" / "train" / "train_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["epochs_run"] == 2
    assert summary["best_val_auc"] > 0.55


def test_a_node_killed_mid_epoch_resumes_when_the_jobset_restarts_all_nodes(
    images, tiny_dataset, tmp_path
):
    """A node container dies mid-epoch (a preempted node); its peer fails on the lost connection,
    and, as the JobSet does, all nodes start again with the same command: they resume from the
    last checkpoint on the shared volume and finish every epoch once."""
    import time

    from components.train.checkpoint import LAST

    engine, refs = images
    root = shared_volume(tmp_path, tiny_dataset)
    plan = TrainPlan(
        **{**PLAN, "micro_batch": 64}, max_epochs=3, nnodes=2, nproc_per_node=1,
        checkpoint_every_steps=10,
    )  # fmt: skip
    job = rendered_job(root, refs["trainer"], plan)
    names = start_nodes(engine, refs["trainer"], job, root, free_port())
    try:
        deadline = time.monotonic() + 300
        while not (root / "runs" / "r" / "train" / LAST).exists():
            assert time.monotonic() < deadline, "no mid-epoch checkpoint in 300s"
            time.sleep(0.2)
        subprocess.run([engine, "kill", names[1]], check=True, capture_output=True)
        first = wait_all(engine, names, timeout=300)
    finally:
        logs = logs_and_remove(engine, names)
    assert first[1] != 0 and first[0] != 0, logs  # the peer of a lost node fails too
    run_nodes(engine, refs["trainer"], job, root)  # all nodes again, as the JobSet restarts them
    summary = json.loads((root / "runs" / "r" / "train" / "train_summary.json").read_text())
    assert summary["resumed_from"] and summary["world_size"] == 2
    assert [r["epoch"] for r in summary["history"]] == [0, 1, 2]  # each epoch exactly once
