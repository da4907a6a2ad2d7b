"""Benchmark: can the data loader feed the model? make_loader's batches/s vs the model's steps/s.

Measures, on one dataset and in one run:

* the tuned loader path of the trainer (``BatchDataset`` + ``ShardedBatchSampler``
  + ``make_loader``) at micro-batch 1024 with 0, 1 and 2 worker processes:
  batches/s delivered to the consuming process (after a warm-up that includes
  the workers' start), and that process's own CPU time per batch;
* the model's consumption rate: forward + backward + optimizer step of the
  ``local`` config at micro-batch 1024 on one intra-op thread, with sparse
  item/user tables (SparseAdam) and fused AdamW, gradient clipping as the
  trainer does (``components.train.optim.Optimizers``), on real batches
  gathered beforehand (so no loading inside the timing).

The ratio loader batches/s / model steps/s says how far ahead of the model the
loader runs (goal: >= 10x; the step then waits for data at most ~10% of its
time even with no overlap at all). Writes benchmarks/results/loader.json and
the block between ``<!-- bench:loader:start/end -->`` (docs/performance.md).

    python -m benchmarks.loader                      # data/dataset (`make run` creates it)
    python -m benchmarks.loader --quick --no-readme  # seconds, for smoke tests
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.measure import machine
from benchmarks.readme import dataset_benchmark_parser, publish, rate, require_dataset
from components.common.dataset_meta import DatasetMeta
from components.common.plan import TrainPlan
from components.train.data import BatchDataset, ShardedBatchSampler, make_loader
from components.train.model import Vocab, build_model
from components.train.optim import Optimizers

NAME = "loader"
MICRO_BATCH = 1024
TARGET_RATIO = 10.0


def epochs(loader, sampler: ShardedBatchSampler):
    """The loader's batches, epoch after epoch, without end."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def measure_loader(
    data: Path, workers: int, micro_batch: int, batches: int, warmup: int, seed: int = 0
) -> dict:
    """Batches/s of the trainer's loader at ``workers`` worker processes, epochs back to back."""
    meta = DatasetMeta.read(data, splits=("train",))
    dataset = BatchDataset(data, "train", meta)
    sampler = ShardedBatchSampler(len(dataset), micro_batch, seed=seed)
    plan = TrainPlan(micro_batch=micro_batch, num_workers=workers, seed=seed)
    loader = make_loader(dataset, sampler, plan, "cpu")

    batches_iter = epochs(loader, sampler)
    for _ in range(warmup):  # includes starting the workers and filling their prefetch queues
        next(batches_iter)
    rows = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(batches):
        rows += len(next(batches_iter)["label"])
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    batches_iter.close()
    del batches_iter, loader
    gc.collect()  # shuts the persistent workers down before the next measurement
    return {
        "num_workers": workers,
        "batches": batches,
        "rows": rows,
        "seconds": round(seconds, 4),
        "batches_per_s": rate(batches, seconds),
        "samples_per_s": rate(rows, seconds),
        "main_cpu_ms_per_batch": 1000 * cpu / batches,
    }


def measure_model(
    data: Path,
    config: str,
    micro_batch: int,
    steps: int,
    warmup: int,
    threads: int = 1,
    seed: int = 0,
) -> dict:
    """Optimizer steps/s of the model on pre-gathered batches: what the trainer's step costs."""
    torch.set_num_threads(threads)
    meta = DatasetMeta.read(data, splits=("train",))
    dataset = BatchDataset(data, "train", meta)
    rng = np.random.default_rng(seed)
    rows = min(micro_batch, len(dataset))
    batches = [
        dataset[np.sort(rng.choice(len(dataset), size=rows, replace=False))] for _ in range(4)
    ]
    torch.manual_seed(seed)
    model = build_model(config, Vocab.from_meta(meta), sparse=True)
    model.init_from_meta(meta)
    model.train()
    plan = TrainPlan(model=config, micro_batch=micro_batch, cpu_threads=threads, seed=seed)
    optim = Optimizers(model, plan, warmup + steps)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    dense = list(model.dense_parameters())

    def step(batch: dict) -> None:
        loss = loss_fn(model(batch), batch["label"]) / len(batch["label"])
        loss.backward()
        if plan.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(dense, plan.grad_clip)
        optim.step(None)
        optim.zero_grad()

    for i in range(warmup):
        step(batches[i % len(batches)])
    t0 = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    seconds = time.perf_counter() - t0
    return {
        "model": config,
        "micro_batch": rows,
        "threads": threads,
        "sparse_embeddings": True,
        "optimizers": "SparseAdam (item/user) + AdamW(fused=True)",
        "steps": steps,
        "seconds": round(seconds, 4),
        "steps_per_s": rate(steps, seconds),
        "samples_per_s": rate(steps * rows, seconds),
    }


def readme_table(result: dict) -> str:
    m, model = result["machine"], result["model_step"]
    lines = [
        f"Measured by `python -m benchmarks.loader` on {m['cpus']} cores ({m['cpu_model']}), "
        f"{m['memory_gib']} GiB RAM; {result['train_rows']:,} training rows, micro-batch "
        f"{result['micro_batch']:,}{' (--quick)' if result['quick'] else ''}.",
        "",
        "| what | batches/s | samples/s | consumer CPU ms/batch | loader / model |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["loaders"]:
        lines.append(
            f"| make_loader, num_workers={r['num_workers']} | {r['batches_per_s']:,.1f} | "
            f"{r['samples_per_s']:,.0f} | {r['main_cpu_ms_per_batch']:.2f} | "
            f"**{r['ratio']:.1f}x** |"
        )
    lines.append(
        f"| model step (`{model['model']}`, fwd+bwd+optimizer, {model['threads']} thread) | "
        f"{model['steps_per_s']:,.2f} | {model['samples_per_s']:,.0f} | | 1x |"
    )
    lines += [
        "",
        f"- loader batches/s / model steps/s (goal: >= {TARGET_RATIO:.0f}x; measured: best "
        f"**{result['best_ratio']:.1f}x**); consumer CPU ms/batch is what the training process "
        "itself pays per batch",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = dataset_benchmark_parser(__doc__, "loader")
    p.add_argument("--workers", default="0,1,2", help="loader worker counts to measure")
    p.add_argument("--micro-batch", type=int, default=MICRO_BATCH)
    p.add_argument(
        "--model", default="local", help="named model config whose step the loader must feed"
    )
    p.add_argument(
        "--batches", type=int, default=None, help="timed loader batches per worker count"
    )
    p.add_argument("--steps", type=int, default=None, help="timed model steps")
    args = p.parse_args(argv)
    data = require_dataset(args.data, "loader.py")
    batches = args.batches or (12 if args.quick else 400)
    steps = args.steps or (3 if args.quick else 40)
    loader_warmup, model_warmup = (2, 1) if args.quick else (20, 5)
    workers = [int(w) for w in args.workers.split(",") if w.strip()]

    meta = DatasetMeta.read(data, splits=("train",))
    model = measure_model(data, args.model, args.micro_batch, steps, model_warmup)
    print(
        f"  model step   {model['steps_per_s']:8.2f} steps/s  {model['samples_per_s']:10,.0f} samples/s",
        flush=True,
    )
    loaders = []
    for w in workers:
        r = measure_loader(data, w, args.micro_batch, batches, loader_warmup)
        r["ratio"] = rate(r["batches_per_s"], model["steps_per_s"])
        loaders.append(r)
        print(
            f"  num_workers={w}  {r['batches_per_s']:8.1f} batches/s "
            f"{r['samples_per_s']:10,.0f} samples/s  "
            f"{r['ratio']:6.1f}x the model",
            flush=True,
        )
    best = max((r["ratio"] for r in loaders), default=0.0)
    result = {
        "benchmark": NAME,
        "machine": machine(),
        "quick": args.quick,
        "data": str(data),
        "train_rows": meta.split("train").rows,
        "micro_batch": args.micro_batch,
        "model_step": model,
        "loaders": loaders,
        "target_ratio": TARGET_RATIO,
        "best_ratio": best,
        "meets_target": best >= TARGET_RATIO,
    }
    publish(
        NAME,
        result,
        readme_table(result),
        args.results,
        throwaway=args.quick,
        readme=not args.no_readme,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
