"""One node of a multi-node TrainJob: ``python -m components.train.node --module components.train
[trainer flags]``, the command the TrainJob's pods run.

torchrun as :mod:`components.train.torchrun` runs it, plus what only a job across pods meets: the
static rendezvous of its nodes at node 0's address (``PET_MASTER_ADDR``). A node whose peers
never join -- a pod that was never scheduled, a node that died before the rendezvous -- fails
after the rendezvous timeout (``PET_RDZV_CONF=timeout=N``, set by the TrainJob) with one line
naming the rendezvous and how far it got, instead of torch's traceback: node 0 waiting for its
peers meets a ``DistStoreError``, any other node whose node 0 never listens a
``DistNetworkError``; both are a ``DistError``, which is what is caught.
"""

from __future__ import annotations

import os
import sys

from components.common.cli import Exit


def rendezvous_failure(exc: BaseException, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    detail = " ".join(str(exc).split())[:300] or type(exc).__name__
    return (
        f"torchrun: node {env.get('PET_NODE_RANK', '?')} of {env.get('PET_NNODES', '?')}: the "
        f"rendezvous at {env.get('PET_MASTER_ADDR', '?')}:{env.get('PET_MASTER_PORT', '?')} "
        f"failed ({env.get('PET_RDZV_CONF') or 'torch default timeout'}): {detail}; a node that "
        "never joined has not started: see its pod's events"
    )


def main() -> int:
    from torch.distributed import DistError

    from components.train.torchrun import main as torchrun

    try:
        return torchrun()
    except DistError as exc:
        print(rendezvous_failure(exc), file=sys.stderr)
        return Exit.FAILED


if __name__ == "__main__":
    sys.exit(main())
