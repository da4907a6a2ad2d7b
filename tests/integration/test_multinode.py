"""Multi-node training, on one machine: two torchrun agents started exactly as Kubeflow Trainer starts
the nodes of the TrainJob the launcher renders.

Each "node" runs the rendered TrainJob's command with the rendered environment plus what Trainer's
torch plugin injects into the ``node`` container (:func:`pipelines.containers.trainjob_node_env`; node 0's address is this
machine, the port a free one). torchrun reads each ``PET_*`` variable as the default of its flag,
so nothing else is passed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from components.common.plan import TrainPlan, write_plan
from components.common.train_summary import TrainSummary
from components.train.backend import LaunchSpec
from components.train.launch import LocalTorchrun
from kube.trainjob import build_trainjob
from kube.types import TrainJobTarget
from pipelines.containers import trainjob_node_env as node_env
from tests.nodes import argv, free_port

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


def node_processes(job: dict, port: int, log_dir, ranks=None) -> list[subprocess.Popen]:
    """One process per node (``ranks``: only those): the rendered command and environment, plus
    the torch plugin's PET_*."""
    command = argv(job)
    assert command[0] == "python"  # the image's venv interpreter; here this test's
    command[0] = sys.executable
    procs = []
    for rank in range(job["spec"]["trainer"]["numNodes"]) if ranks is None else ranks:
        env = {**os.environ, **node_env(job, rank, port)}
        log = open(log_dir / f"node-{rank}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
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
    nodes = TrainSummary.read(tmp_path / "nodes")
    assert nodes.world_size == 2 and nodes.epochs_run == 2

    # the same global batch on one node with two processes: the same training within noise
    one_node = TrainPlan(**PLAN, nnodes=1, nproc_per_node=2)
    plan = write_plan(tmp_path / "plan-1x2.json", one_node)
    local = LaunchSpec.of(data=str(tiny_dataset), out=str(tmp_path / "local"), plan=str(plan))
    single = LocalTorchrun().run(local)
    assert single.world_size == 2
    assert abs(nodes.best_val_auc - single.best_val_auc) < 0.01, (nodes, single)
    # world size 2 either way: the same shards, steps and losses, epoch by epoch
    losses = [[round(h["train_loss"], 3) for h in run.history] for run in (nodes, single)]
    assert losses[0] == pytest.approx(losses[1], abs=0.01), losses


def test_a_node_whose_peers_never_join_fails_in_bounded_time_in_one_line(tiny_dataset, tmp_path):
    """Node 0 of two, started alone (node 1's pod never scheduled): the rendezvous times out after
    the TrainJob's PET_RDZV_CONF timeout and the node says so in one line, with no traceback."""
    import time

    plan = TrainPlan(**PLAN, nnodes=2, nproc_per_node=1)
    path = write_plan(tmp_path / "plan.json", plan)
    spec = LaunchSpec.of(data=str(tiny_dataset), out=str(tmp_path / "alone"), plan=str(path))
    job = build_trainjob(spec, plan, TrainJobTarget(rendezvous_timeout_s=10))
    started = time.monotonic()
    (node0,) = node_processes(job, free_port(), tmp_path, ranks=[0])
    code = node0.wait(timeout=120)
    elapsed = time.monotonic() - started
    log = (tmp_path / "node-0.log").read_text()
    assert code == 1 and elapsed < 90, (code, elapsed, log[-2000:])
    (line,) = [line for line in log.splitlines() if line.startswith("torchrun: node 0 of 2")]
    assert "the rendezvous at 127.0.0.1:" in line and "1/2 clients joined" in line, line
    assert "Traceback" not in log


def test_a_node_whose_node_zero_never_comes_up_fails_in_one_line(tiny_dataset, tmp_path):
    """Node 1 of two, started alone (node 0's pod never scheduled): nothing listens at the
    master's address; after the TrainJob's timeout the node says so in one line, no traceback."""
    import time

    plan = TrainPlan(**PLAN, nnodes=2, nproc_per_node=1)
    path = write_plan(tmp_path / "plan.json", plan)
    spec = LaunchSpec.of(data=str(tiny_dataset), out=str(tmp_path / "alone"), plan=str(path))
    job = build_trainjob(spec, plan, TrainJobTarget(rendezvous_timeout_s=3))
    started = time.monotonic()
    (node1,) = node_processes(job, free_port(), tmp_path, ranks=[1])
    code = node1.wait(timeout=180)
    elapsed = time.monotonic() - started
    log = (tmp_path / "node-1.log").read_text()
    assert code == 1 and elapsed < 150, (code, elapsed, log[-2000:])
    (line,) = [line for line in log.splitlines() if line.startswith("torchrun: node 1 of 2")]
    assert "the rendezvous at 127.0.0.1:" in line and "failed" in line, line
    assert "Traceback" not in log, log[-3000:]
