"""Where a training process runs: its rank and device (from the launcher's environment), the
precision's autocast, the plan's checks against the device, compiling, and moving batches.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from components.common.plan import TrainPlan
from components.common.progress import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class Runtime:
    """Where this process sits in the job (from the launcher's environment)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def local_runtime() -> Runtime:
    """This process's place in the launch (torchrun's variables) and device, before it joins
    the process group: what a plan is checked against, so that every rank refuses a plan the
    same way instead of one rank leaving while its peers connect."""
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    return Runtime(rank, world_size, local_rank, device, backend)


def join_group(runtime: Runtime) -> Runtime:
    """Join the launch's process group (a no-op for one process); ``runtime`` back."""
    if runtime.distributed and not dist.is_initialized():
        dist.init_process_group(
            backend=runtime.backend,
            init_method="env://",
            rank=runtime.rank,
            world_size=runtime.world_size,
        )
    return runtime


def init_runtime() -> Runtime:
    """This process's runtime, in its process group."""
    return join_group(local_runtime())


def autocast_for(precision: str, device: torch.device):
    """The autocast context of a precision; fp32 is no autocast at all."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def check_plan_for_device(plan: TrainPlan, runtime: Runtime) -> TrainPlan:
    """Refuse settings this device cannot run, with the reason."""
    if plan.precision == "fp16" and runtime.device.type != "cuda":
        raise ValueError("plan.train.precision fp16 needs a CUDA device (use fp32 or bf16 on CPU)")
    if (
        plan.precision == "bf16"
        and runtime.device.type == "cuda"
        and not torch.cuda.is_bf16_supported()
    ):
        raise ValueError("plan.train.precision bf16 is not supported by this GPU (use fp16)")
    if plan.sparse_embeddings == "on" and runtime.backend == "nccl" and runtime.distributed:
        raise ValueError(
            "plan.train.sparse_embeddings on: NCCL does not reduce sparse gradients (use auto)"
        )
    if plan.compile != "off" and use_sparse(plan, runtime):
        raise ValueError(
            f"plan.train.compile {plan.compile}: sparse embedding gradients do not compile; "
            "set sparse_embeddings off (on NCCL, auto is dense) or compile off"
        )
    if plan.world_size != runtime.world_size:
        log.warning(
            "plan is for %d processes, running with %d: global batch becomes %d",
            plan.world_size,
            runtime.world_size,
            plan.micro_batch * plan.grad_accum * runtime.world_size,
        )
    return plan


def compiled(module: torch.nn.Module, mode: str) -> torch.nn.Module:
    """``module`` as the training step runs it: eager (``off``) or ``torch.compile``d in
    ``mode`` (:data:`components.common.plan.COMPILE_MODES`) with static shapes, so that CUDA
    graphs can capture the step (a short last batch compiles once more)."""
    if mode == "off":
        return module
    return torch.compile(module, mode=None if mode == "default" else mode, dynamic=False)


def use_sparse(plan: TrainPlan, runtime: Runtime) -> bool:
    # gloo reduces sparse gradients (much less traffic for big tables); NCCL cannot
    if plan.sparse_embeddings == "auto":
        return runtime.backend == "gloo"
    return plan.sparse_embeddings == "on"


def gather_predictions(runtime: Runtime, scores: np.ndarray, labels: np.ndarray):
    """All ranks' validation scores and labels, in rank order, on every rank."""
    if not runtime.distributed:
        return scores, labels
    parts: list[Any] = [None] * runtime.world_size
    dist.all_gather_object(parts, (scores, labels))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
