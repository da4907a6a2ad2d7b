"""Measure training memory and speed with a few real steps of the real model.

At two micro-batch sizes the real model (the trainer's optimizers: SparseAdam
for sparse tables + fused AdamW) runs forward, backward and an optimizer step;
the peak memory is linear in the batch, so two points give the bytes per
sample (slope) and the batch-independent bytes (intercept).

* CUDA: ``torch.cuda.max_memory_allocated`` of each step.
* CPU (RSS is too coarse for this): the bytes of the parameters, their
  gradients (sparse ones: indices + values) and the optimizer state, plus the
  bytes autograd saves for backward, counted with
  ``torch.autograd.graph.saved_tensors_hooks`` as the sum of the unique
  storages' ``nbytes`` (parameter storages excluded: they are the weights).

Batches are synthetic full histories (hist_len = L, no padding), the worst case
for the sparse gradients (padding rows are dropped from them).

Speed (:func:`probe_speed`) is measured differently: the trainer's own epoch
loop (components/train/steps.py ``StepRunner.run_epoch``: its loader, loss, L2 penalty,
optimizers) times real micro-batches of the plan's size on rows of
the dataset's train split (sampled across it), and its ``evaluate`` times
validation on sampled rows of the val split, so the measured rate includes
everything a real step does on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from components.common.plan import TrainPlan
from components.common.progress import PROGRESS, get_logger
from components.train.model import ModelConfig, Vocab, build_model
from components.train.optim import Optimizers
from components.train.runtime import autocast_for

WARM_BATCH = 8

log = get_logger(__name__)


def synthetic_batch(
    vocab: Vocab, batch: int, seed: int = 0, device: str | torch.device = "cpu"
) -> dict[str, torch.Tensor]:
    """A batch of the trainer's batch contract with full histories (clicks and skipped exposures),
    random ids and standard-normal count features."""
    g = np.random.default_rng(seed)
    length = vocab.seq_len

    def ids(high: int, shape) -> torch.Tensor:
        return torch.from_numpy(g.integers(1, max(high, 2), size=shape, dtype=np.int64))

    negatives = vocab.neg_len
    out = {
        "hist_item": ids(vocab.item, (batch, length)),
        "hist_cat": ids(vocab.category, (batch, length)),
        "hist_gap": ids(vocab.gap, (batch, length)),
        "hist_len": torch.full((batch,), length, dtype=torch.int64),
        "neg_item": ids(vocab.item, (batch, negatives)),
        "neg_cat": ids(vocab.category, (batch, negatives)),
        "neg_gap": ids(vocab.gap, (batch, negatives)),
        "neg_len": torch.full((batch,), negatives, dtype=torch.int64),
        "dense": torch.from_numpy(g.standard_normal((batch, vocab.dense)).astype(np.float32)),
        "target_item": ids(vocab.item, (batch,)),
        "target_cat": ids(vocab.category, (batch,)),
        "user": ids(vocab.user, (batch,)),
        "context": torch.stack(
            [
                torch.from_numpy(g.integers(0, vocab.hour, batch, dtype=np.int64)),
                torch.from_numpy(g.integers(0, vocab.dow, batch, dtype=np.int64)),
            ],
            1,
        ),
        "label": torch.from_numpy((g.random(batch) < 0.1).astype(np.float32)),
    }
    return {k: v.to(device) for k, v in out.items()}


@dataclass
class SavedTensorCounter:
    """Sum of the unique storages autograd saves for backward (excluding ``exclude`` storages)."""

    exclude: set[int] = field(default_factory=set)
    seen: dict[int, int] = field(default_factory=dict)

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        try:
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # sparse or exotic tensors: count their parts
            if tensor.is_sparse:
                for part in (tensor._indices(), tensor._values()):
                    self.pack(part)
            return tensor
        if ptr and ptr not in self.exclude and ptr not in self.seen:
            self.seen[ptr] = storage.nbytes()
        return tensor

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @property
    def bytes(self) -> int:
        return sum(self.seen.values())

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def tensor_bytes(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return 0
    if tensor.is_sparse:
        return tensor._indices().nbytes + tensor._values().nbytes
    return tensor.nbytes


def optimizer_state_bytes(optim: Optimizers) -> int:
    return sum(
        tensor_bytes(v)
        for o in optim.all
        for state in o.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )


class ProbeRunner:
    """The real model and optimizers on a device, ready to measure steps."""

    def __init__(
        self,
        config: ModelConfig,
        vocab: Vocab,
        *,
        sparse: bool,
        precision: str = "fp32",
        activation_checkpointing: bool = False,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        torch.manual_seed(seed)
        self.vocab = vocab
        self.device = torch.device(device)
        self.precision = precision
        self.model = build_model(
            config, vocab, sparse=sparse, activation_checkpointing=activation_checkpointing
        ).to(self.device)
        self.model.train()
        plan = TrainPlan(model=config.name, precision=precision, lr=1e-3)
        self.optim = Optimizers(self.model, plan, total_steps=1000)
        self.loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
        self.step(synthetic_batch(vocab, WARM_BATCH, seed=1, device=self.device))  # optimizer state

    def _forward_backward(self, batch: dict[str, torch.Tensor], counter: SavedTensorCounter | None):
        with autocast_for(self.precision, self.device):
            if counter is not None:
                with counter.hooks():
                    logits = self.model(batch)
                    loss = self.loss_fn(logits.float(), batch["label"]) / len(batch["label"])
            else:
                logits = self.model(batch)
                loss = self.loss_fn(logits.float(), batch["label"]) / len(batch["label"])
        loss.backward()

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        self._forward_backward(batch, None)
        self.optim.step(None)
        self.optim.zero_grad()

    def cpu_breakdown(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """Weights, gradients (after backward), optimizer state and saved bytes of one step."""
        params = list(self.model.parameters())
        counter = SavedTensorCounter(exclude={p.untyped_storage().data_ptr() for p in params})
        self._forward_backward(batch, counter)
        out = {
            "weights": sum(p.nbytes for p in params),
            "gradients": sum(tensor_bytes(p.grad) for p in params),
            "optimizer": optimizer_state_bytes(self.optim),
            "saved": counter.bytes,
        }
        self.optim.step(None)
        self.optim.zero_grad()
        out["total"] = sum(out.values())
        return out

    def cuda_peak(self, batch: dict[str, torch.Tensor]) -> int:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.step(batch)
        torch.cuda.synchronize(self.device)
        return int(torch.cuda.max_memory_allocated(self.device))

    def measure(self, micro_batch: int, seed: int = 2) -> dict[str, int]:
        batch = synthetic_batch(self.vocab, micro_batch, seed=seed, device=self.device)
        if self.device.type == "cuda":
            return {"total": self.cuda_peak(batch)}
        return self.cpu_breakdown(batch)

    def samples_per_s(self, micro_batch: int, steps: int = 3) -> float:
        """Training samples/s of this process at ``micro_batch`` (after one untimed step)."""
        batch = synthetic_batch(self.vocab, micro_batch, seed=3, device=self.device)
        self.step(batch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step(batch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return steps * micro_batch / max(time.perf_counter() - start, 1e-9)


def fit_linear(batches: tuple[int, int], values: tuple[float, float]) -> tuple[float, float]:
    """(slope, intercept) of the line through two (batch, bytes) points."""
    (b1, b2), (m1, m2) = batches, values
    if b1 == b2:
        raise ValueError("the probe needs two different micro-batch sizes")
    slope = (m2 - m1) / (b2 - b1)
    return slope, m1 - slope * b1


def probe(
    config: ModelConfig,
    vocab: Vocab,
    *,
    sparse: bool,
    precision: str = "fp32",
    activation_checkpointing: bool = False,
    device: str = "cpu",
    micro_batches: tuple[int, int] = (32, 128),
    timing_steps: int = 3,
) -> dict[str, Any]:
    """Measure memory at two micro-batch sizes and fit bytes per sample; time the larger one."""
    runner = ProbeRunner(
        config,
        vocab,
        sparse=sparse,
        precision=precision,
        activation_checkpointing=activation_checkpointing,
        device=device,
    )
    points = [runner.measure(b) for b in micro_batches]
    slope, intercept = fit_linear(micro_batches, (points[0]["total"], points[1]["total"]))
    result: dict[str, Any] = {
        "device": str(runner.device),
        "method": (
            "torch.cuda.max_memory_allocated"
            if runner.device.type == "cuda"
            else "tensor sizes + saved_tensors_hooks"
        ),
        "micro_batches": list(micro_batches),
        "measured": points,
        "bytes_per_sample": slope,
        "fixed_bytes": intercept,
        "samples_per_s": runner.samples_per_s(max(micro_batches), timing_steps)
        if timing_steps
        else None,
    }
    if runner.device.type == "cpu":
        result["saved_bytes_per_sample"] = fit_linear(
            micro_batches, (points[0]["saved"], points[1]["saved"])
        )[0]
        result["gradient_bytes_per_sample"] = fit_linear(
            micro_batches, (points[0]["gradients"], points[1]["gradients"])
        )[0]
    return result


class Rows(torch.utils.data.Dataset):
    """Some rows of a batch dataset (sorted ``rows``), indexed 0..len-1 as the trainer's loaders do."""

    def __init__(self, base, rows: np.ndarray) -> None:
        self.base, self.rows = base, np.sort(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        return self.base[self.rows[indices]]


def sample_rows(n_rows: int, count: int, seed: int) -> np.ndarray:
    """``count`` distinct rows spread over the split: the first rows alone would touch few items
    and users and keep their embedding and optimizer rows in cache, which real epochs do not."""
    return np.random.default_rng(seed).choice(n_rows, size=min(count, n_rows), replace=False)


def probe_speed(
    data: str,
    plan: TrainPlan,
    *,
    device: str = "cpu",
    steps: int = 16,
    warmup: int = 2,
    eval_rows: int = 4096,
    runtime=None,
) -> dict[str, Any]:
    """Time the trainer's real steps of ``plan``'s model on rows sampled across ``data``.

    ``plan.micro_batch`` rows per micro-step on each process of ``runtime`` (this process
    alone by default; under torchrun, DDP over all of them, as the trainer runs), accumulation
    1: every micro-step pays an optimizer step and a gradient all-reduce, which slightly
    over-counts plans that accumulate. ``warmup`` untimed micro-steps, then ``steps`` timed
    ones through ``run_epoch``, on distinct rows sampled across the split; validation through
    ``evaluate`` on ``eval_rows`` sampled rows. ``ready_at`` (wall clock) is when the first step
    could start: data open, model built, the L2 penalty's id frequencies counted, optimizers made,
    as in the trainer; ``done_at`` is when the measurement ended.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from components.common.dataset_meta import DatasetMeta
    from components.train import trainer
    from components.train.data import BatchDataset, ShardedBatchSampler, make_loader
    from components.train.optim import IdPenalty
    from components.train.runtime import Runtime, use_sparse
    from components.train.state import TrainState
    from components.train.steps import EpochStats, StepRunner

    torch_device = torch.device(device)
    runtime = runtime or Runtime(
        0, 1, 0, torch_device, "nccl" if torch_device.type == "cuda" else "gloo"
    )
    world = runtime.world_size
    meta = DatasetMeta.read(data)
    vocab = Vocab.from_meta(meta)
    train_set, val_set = BatchDataset(data, "train", meta), BatchDataset(data, "val", meta)
    rows = min(len(train_set), (warmup + steps) * plan.micro_batch * world)
    if rows < 2 * plan.micro_batch * world or len(val_set) == 0:
        raise ValueError(
            f"{data}: too few rows to time steps of micro-batch {plan.micro_batch} on {world} "
            f"process(es) ({len(train_set)} train, {len(val_set)} val)"
        )
    plan = plan.replace(grad_accum=1, checkpoint_every_steps=0, max_epochs=1, progress_seconds=0)
    torch.manual_seed(plan.seed)
    sparse = use_sparse(plan, runtime)
    model = build_model(
        plan.model, vocab, sparse=sparse, activation_checkpointing=plan.activation_checkpointing
    ).to(runtime.device)
    wrapped = (
        DDP(model, device_ids=[runtime.local_rank] if runtime.device.type == "cuda" else None)
        if runtime.distributed
        else model
    )
    start = time.perf_counter()
    penalty = IdPenalty(model, train_set, plan.embedding_l2) if plan.embedding_l2 > 0 else None
    setup = time.perf_counter() - start
    optim = Optimizers(model, plan, total_steps=warmup + steps)
    scaler = torch.amp.GradScaler("cuda") if plan.precision == "fp16" else None
    runner = StepRunner(wrapped, model, optim, scaler, plan, runtime, penalty)
    ready_at = time.time()

    def epoch(n_rows: int, index: int) -> EpochStats:
        subset = Rows(train_set, sample_rows(len(train_set), n_rows, plan.seed + index))
        sampler = ShardedBatchSampler(
            len(subset), plan.micro_batch, world, runtime.rank, seed=plan.seed
        )
        loader = make_loader(subset, sampler, plan, runtime.device.type)
        return runner.run_epoch(loader, sampler, TrainState(epoch=index))

    epoch(min(rows, max(warmup, 1) * plan.micro_batch * world), 0)
    timed_rows = min(len(train_set), steps * plan.micro_batch * world)
    timed = epoch(timed_rows, 1)
    start = time.perf_counter()
    trainer.evaluate(
        model, Rows(val_set, sample_rows(len(val_set), eval_rows, plan.seed)), plan, runtime
    )
    eval_seconds = time.perf_counter() - start
    if runtime.device.type == "cuda":
        torch.cuda.synchronize(runtime.device)
    evaluated = min(eval_rows, len(val_set))
    per_process = timed_rows / world / max(timed.seconds, 1e-9)
    return {
        "device": str(runtime.device),
        "processes": world,
        "micro_batch": plan.micro_batch,
        "steps": steps,
        "samples": int(timed_rows),
        "seconds": timed.seconds,
        "samples_per_s": per_process,
        "step_seconds": timed.seconds / max(1, -(-timed_rows // (plan.micro_batch * world))),
        "eval_rows": evaluated,
        "eval_seconds": eval_seconds,
        "eval_samples_per_s": evaluated / world / max(eval_seconds, 1e-9),
        "setup_seconds": setup,
        "ready_at": ready_at,
        "done_at": time.time(),
        "method": "trainer run_epoch + evaluate on rows sampled across the dataset",
    }


def probe_launch(
    data: str, plan: TrainPlan, *, timeout: float = 900.0, **options: Any
) -> dict[str, Any]:
    """:func:`probe_speed` in ``plan.nproc_per_node`` processes launched by the train stage's own
    ``torchrun`` command: the per-process rates then include DDP's gradient all-reduce and the
    processes' competition for the machine, and the launch is timed too. ``startup_seconds`` =
    launch to the first step (torchrun, interpreters importing torch and the trainer, process
    group, data, model, L2 frequencies, optimizers) + the processes' exit after the last step,
    all measured now, on this machine as loaded as it is.
    """
    import subprocess
    import tempfile

    from components.train.launch import torchrun

    with tempfile.TemporaryDirectory(prefix="dailyrec-probe-") as tmp:
        plan_file, out = Path(tmp) / "plan.json", Path(tmp) / "speed.json"
        plan_file.write_text(json.dumps({"plan": dataclasses.asdict(plan), "options": options}))
        command = torchrun(
            plan.nproc_per_node,
            0,
            "-m",
            "components.estimate.probe",
            "--data",
            str(data),
            "--plan",
            str(plan_file),
            "--out",
            str(out),
        )
        log.log(
            PROGRESS,
            "speed probe: timing the trainer's steps (micro-batch %d) in %d process(es) launched "
            "by torchrun; this takes a minute or two",
            plan.micro_batch,
            plan.nproc_per_node,
        )
        launched_at = time.time()
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "OMP_NUM_THREADS": str(plan.cpu_threads)},
        )
        ended_at = time.time()
        if proc.returncode != 0 or not out.is_file():
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            reason = next(
                (line.removeprefix("probe: ") for line in lines if line.startswith("probe: ")),
                lines[-1] if lines else f"exit code {proc.returncode}",
            )
            raise ValueError(reason)
        result = json.loads(out.read_text())
    startup = (result["ready_at"] - launched_at) + (ended_at - result["done_at"])
    log.log(
        PROGRESS,
        "speed probe: %s samples/s per process, start-up %.0fs (%.0fs in all)",
        f"{result['samples_per_s']:,.0f}",
        startup,
        ended_at - launched_at,
    )
    return {
        **result,
        "startup_seconds": startup,
        "launch_seconds": ended_at - launched_at,
        "method": f"{result['method']}, in {plan.nproc_per_node} process(es) launched by torchrun",
    }


def main(argv: list[str] | None = None) -> int:
    """A launched probe worker: measure, and rank 0 writes the result (used by :func:`probe_launch`)."""
    import sys

    from components.common.cli import Exit, cli_parser, exit_for
    from components.train.runtime import init_runtime

    parser = cli_parser(
        "python -m components.estimate.probe", "One process of the estimate's launched speed probe."
    )
    parser.add_argument("--data", required=True, help="preprocessed dataset folder")
    parser.add_argument(
        "--plan", required=True, help="JSON file: the plan to time and probe_speed options"
    )
    parser.add_argument("--out", required=True, help="where rank 0 writes the measurement (JSON)")
    args = parser.parse_args(argv)
    doc = json.loads(Path(args.plan).read_text())
    runtime = init_runtime()
    torch.set_num_threads(doc["plan"].get("cpu_threads") or 1)
    try:
        result = probe_speed(args.data, TrainPlan(**doc["plan"]), runtime=runtime, **doc["options"])
    except ValueError as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return exit_for(exc)
    if runtime.is_main:
        with open(args.out + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(args.out + ".tmp", args.out)
    return Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
