"""What Kubeflow Trainer gives each node of a TrainJob, for tests that start the nodes themselves.

trainer v2.3.0 ``pkg/runtime/framework/plugins/torch/torch.go`` injects into the ``node`` container:
``PET_NNODES`` (numNodes), ``PET_NPROC_PER_NODE`` (numProcPerNode), ``PET_NODE_RANK`` (the Job
completion index), ``PET_MASTER_ADDR`` (node 0's pod) and ``PET_MASTER_PORT`` (29500), on top of the
TrainJob's own ``env``.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_env(job: dict, rank: int, port: int, master: str = "127.0.0.1") -> dict[str, str]:
    """The environment of node ``rank``'s container: the rendered env plus the torch plugin's."""
    trainer = job["spec"]["trainer"]
    return {
        **{e["name"]: e["value"] for e in trainer["env"]},
        "PET_NNODES": str(trainer["numNodes"]),
        "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(port),
    }


def argv(job: dict) -> list[str]:
    trainer = job["spec"]["trainer"]
    return [*trainer["command"], *trainer["args"]]
