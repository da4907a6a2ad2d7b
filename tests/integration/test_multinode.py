"""Multi-node training, on one machine: two torchrun agents started exactly as Kubeflow Trainer starts
the nodes of the TrainJob the launcher renders.

Each "node" runs the rendered TrainJob's command with the rendered environment plus what Trainer's
torch plugin injects into the ``node`` container (trainer v2.3.0
``pkg/runtime/framework/plugins/torch/torch.go``): ``PET_NNODES`` (numNodes),
``PET_NPROC_PER_NODE`` (numProcPerNode), ``PET_NODE_RANK`` (the Job completion index),
``PET_MASTER_ADDR`` (node 0's pod; here this machine) and ``PET_MASTER_PORT`` (29500 there; a free
port here). torchrun reads each ``PET_*`` variable as the default of its flag, so nothing else
is passed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from components.common.plan import TrainPlan, write_plan
from components.train.backend import LaunchSpec
from components.train.launch import LocalTorchrun
from kube.trainjob import build_trainjob
from kube.types import TrainJobTarget

pytestmark = pytest.mark.integration

PLAN = {
    "model": "debug",
    "micro_batch": 256,
    "num_workers": 0,
    "lr": 3e-3,
    "eval_batch": 2048,
    "max_epochs": 2,
    "patience": 5,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_processes(job: dict, port: int, log_dir) -> list[subprocess.Popen]:
    """One process per node: the rendered command and environment, plus the torch plugin's PET_*."""
    trainer = job["spec"]["trainer"]
    argv = [*trainer["command"], *trainer["args"]]
    assert argv[0] == "python"  # the image's venv interpreter; here this test's
    argv[0] = sys.executable
    rendered = {e["name"]: e["value"] for e in trainer["env"]}
    procs = []
    for rank in range(trainer["numNodes"]):
        env = {
            **os.environ,
            **rendered,
            "PET_NNODES": str(trainer["numNodes"]),
            "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": str(port),
        }
        log = open(log_dir / f"node-{rank}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def test_two_nodes_train_like_one_node_with_the_same_global_batch(tiny_dataset, tmp_path):
    two_nodes = TrainPlan(**PLAN, nnodes=2, nproc_per_node=1)
    plan = write_plan(tmp_path / "plan-2x1.json", two_nodes)
    spec = LaunchSpec.of(data=str(tiny_dataset), out=str(tmp_path / "nodes"), plan=str(plan))
    job = build_trainjob(spec, two_nodes, TrainJobTarget())
    assert job["spec"]["trainer"]["numNodes"] == 2
    procs = node_processes(job, free_port(), tmp_path)
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            p.kill()
    logs = "\n".join((tmp_path / f"node-{r}.log").read_text()[-3000:] for r in range(2))
    assert codes == [0, 0], logs
    nodes = json.loads((tmp_path / "nodes" / "train_summary.json").read_text())
    assert nodes["world_size"] == 2 and nodes["epochs_run"] == 2

    # the same global batch on one node with two processes: the same training within noise
    one_node = TrainPlan(**PLAN, nnodes=1, nproc_per_node=2)
    plan = write_plan(tmp_path / "plan-1x2.json", one_node)
    local = LaunchSpec.of(data=str(tiny_dataset), out=str(tmp_path / "local"), plan=str(plan))
    single = LocalTorchrun().run(local)
    assert single["world_size"] == 2
    assert abs(nodes["best_val_auc"] - single["best_val_auc"]) < 0.01, (nodes, single)
    # world size 2 either way: the same shards, steps and losses, epoch by epoch
    losses = [[round(h["train_loss"], 3) for h in run["history"]] for run in (nodes, single)]
    assert losses[0] == pytest.approx(losses[1], abs=0.01), losses
