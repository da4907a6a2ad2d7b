"""Benchmark: the tuned trainer vs. a naive PyTorch setup, and 1 vs 2 processes, in one run.

All runs train the ``local`` model on the same rows (the first ``--rows`` rows
of the dataset's train split, copied into a temporary dataset folder whose
val/test splits are cut to ``--eval-rows``; ``--rows 0`` = the whole split).

(a) naive, "as many teams start": a ``Dataset`` whose ``__getitem__(i)`` returns
    ONE sample (a dict of tensors read from the memory-mapped arrays), default
    collate, ``DataLoader(batch_size=1024, shuffle=True, num_workers=0)``, fp32,
    dense embeddings, plain ``torch.optim.AdamW`` (not fused), torch's default
    intra-op threads. It runs a bounded number of steps (``--naive-steps``, at
    most ``--naive-seconds``) after ``--naive-warmup`` untimed ones (leaving the
    warm-up out favours the baseline); samples/s = timed samples / timed seconds.
(b) tuned: ``components.train.launch.launch`` (torchrun, 1 process) of the real
    trainer, 1 epoch over the same rows, micro-batch 1024, 1 intra-op thread,
    sparse item/user tables (SparseAdam) + fused AdamW, ``--workers`` loader
    workers. samples/s and data-wait come from its train_summary.json (the
    training loop of the epoch only: validation and start-up are not counted).
(c) the same trainer under torchrun with 2 processes at the same global batch
    (micro-batch 512 each): scaling efficiency = samples/s(2) / (2 x samples/s(1)).

Data-wait is measured the same way everywhere: time blocked in
``next(iterator)`` / time of the whole step loop. Writes
benchmarks/results/train.json and the block between
``<!-- bench:train:start/end -->`` (docs/performance.md).

    python -m benchmarks.train                         # data/dataset, 200,000 rows
    python -m benchmarks.train --quick --no-readme     # seconds, for smoke tests
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.measure import machine
from benchmarks.readme import dataset_benchmark_parser, publish, rate, require_dataset
from components.common.dataset import FILES_KEY, SPLITS, record_files
from components.common.dataset_meta import META_FILE, DatasetMeta
from components.common.plan import TrainPlan, write_plan
from components.train.data import BATCH_SPEC
from components.train.launch import LaunchSpec, launch
from components.train.model import Vocab, build_model

NAME = "train"
GLOBAL_BATCH = 1024
MODEL = "local"
LR = 1e-3
TARGET_SPEEDUP, TARGET_WAIT = 2.0, 0.05


# ----------------------------------------------------------------------------- data


def subset_dataset(src: Path, dst: Path, rows: int, eval_rows: int) -> dict:
    """A dataset folder at ``dst`` with the first ``rows`` train rows and ``eval_rows`` val/test rows.

    A split taken whole is symlinked; a cut one is copied. meta.json's row counts
    and positive rates are those of the cut; ``benchmark_subset`` records the cut.
    """
    meta = DatasetMeta.read(src)
    new = meta.to_document()
    dst.mkdir(parents=True, exist_ok=True)
    taken = {}
    for split in SPLITS:
        total = meta.split(split).rows
        want = rows if split == "train" else eval_rows
        n = total if want <= 0 else min(want, total)
        taken[split] = n
        if n == total:
            (dst / split).symlink_to((src / split).resolve(), target_is_directory=True)
            continue
        (dst / split).mkdir()
        for name in meta.arrays:
            array = np.load(src / split / f"{name}.npy", mmap_mode="r")
            np.save(dst / split / f"{name}.npy", np.ascontiguousarray(array[:n]))
        positives = int(np.load(dst / split / "label.npy").sum())
        new["splits"][split].update(
            rows=n, positives=positives, positive_rate=positives / n if n else 0.0
        )
    new["benchmark_subset"] = {"source": str(src), "rows": taken, "how": "first rows of each split"}
    new[FILES_KEY] = record_files(dst)
    written = DatasetMeta.from_document(new, dst / META_FILE)
    written.write(dst)
    return written


class PerSampleDataset(Dataset):
    """The naive dataset: one row per ``__getitem__``, as a dict of tensors read from the memmaps."""

    def __init__(self, data_dir: Path, split: str = "train") -> None:
        self.arrays = {
            name: np.load(Path(data_dir) / split / f"{name}.npy", mmap_mode="r")
            for name in BATCH_SPEC
        }
        self.rows = len(self.arrays["label"])

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            name: torch.tensor(self.arrays[name][i], dtype=dtype)
            for name, dtype in BATCH_SPEC.items()
        }


# ----------------------------------------------------------------------------- runs


def run_naive(data: Path, steps: int, warmup: int, max_seconds: float, seed: int = 0) -> dict:
    """The naive loop: per-sample dataset, default collate, dense tables, AdamW, default threads."""
    meta = DatasetMeta.read(data)
    torch.manual_seed(seed)
    model = build_model(MODEL, Vocab.from_meta(meta), sparse=False)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    loader = DataLoader(
        PerSampleDataset(data), batch_size=GLOBAL_BATCH, shuffle=True, num_workers=0
    )
    iterator = iter(loader)
    wait = seconds = 0.0
    samples = timed = 0
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:  # a small subset: start another epoch
            iterator = iter(loader)
            batch = next(iterator)
        t1 = time.perf_counter()
        loss = loss_fn(model(batch), batch["label"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        t2 = time.perf_counter()
        if step >= warmup:
            wait += t1 - t0
            seconds += t2 - t0
            samples += len(batch["label"])
            timed += 1
            if seconds >= max_seconds:
                break
    return {
        "setup": "naive",
        "processes": 1,
        "threads": torch.get_num_threads(),
        "description": "per-sample Dataset + default collate, DataLoader(batch_size=1024, "
        "shuffle=True, num_workers=0), fp32, dense embeddings, AdamW (not fused), "
        "default torch threads",
        "steps": timed,
        "warmup_steps": warmup,
        "samples": samples,
        "seconds": round(seconds, 3),
        "samples_per_s": rate(samples, seconds),
        "data_wait_fraction": wait / seconds if seconds else 0.0,
    }


def run_tuned(data: Path, work: Path, nproc: int, workers: int) -> dict:
    """The real trainer under torchrun: 1 epoch at the global batch, split over ``nproc`` processes."""
    if GLOBAL_BATCH % nproc:
        raise ValueError(f"global batch {GLOBAL_BATCH} does not split over {nproc} processes")
    plan = TrainPlan(
        model=MODEL,
        micro_batch=GLOBAL_BATCH // nproc,
        nproc_per_node=nproc,
        num_workers=workers,
        cpu_threads=1,
        lr=LR,
        max_epochs=1,
        patience=0,
    )
    plan_path = write_plan(work / f"plan-{nproc}.json", plan)
    out = work / f"tuned-{nproc}"
    started = time.perf_counter()
    summary = launch(
        LaunchSpec.of(
            data=str(data),
            out=str(out),
            plan=str(plan_path),
            nproc=nproc,
            resume="never",
            max_epochs=1,
        )
    )
    epoch = summary.history[0]
    return {
        "setup": "tuned",
        "processes": summary.world_size,
        "threads": plan.cpu_threads,
        "num_workers": workers,
        "micro_batch": plan.micro_batch,
        "global_batch": plan.global_batch,
        "sparse_embeddings": summary.sparse_embeddings,
        "precision": summary.precision,
        "description": f"components.train trainer via torchrun, {nproc} process(es), "
        f"micro-batch {plan.micro_batch}, {workers} loader worker(s) each, "
        "1 thread, sparse tables + SparseAdam, AdamW(fused=True)",
        "epoch_seconds": round(epoch["seconds"], 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "samples_per_s": summary.samples_per_s,
        "data_wait_fraction": summary.data_wait_fraction,
        "val_auc": summary.best_val_auc,
    }


# ----------------------------------------------------------------------------- report


def summarize(naive: dict, tuned: list[dict]) -> dict:
    by = {r["processes"]: r for r in tuned}
    one = by.get(1)
    out: dict = {"target_speedup": TARGET_SPEEDUP, "target_data_wait": TARGET_WAIT}
    if one:
        out["speedup"] = rate(one["samples_per_s"], naive["samples_per_s"])
        out["tuned_data_wait_fraction"] = one["data_wait_fraction"]
        out["meets_speedup_target"] = out["speedup"] >= TARGET_SPEEDUP
        out["meets_data_wait_target"] = one["data_wait_fraction"] <= TARGET_WAIT
    if one and 2 in by:
        out["speedup_2proc"] = rate(by[2]["samples_per_s"], naive["samples_per_s"])
        out["scaling_efficiency"] = rate(by[2]["samples_per_s"], 2 * one["samples_per_s"])
    return out


def readme_table(result: dict) -> str:
    m, s, naive = result["machine"], result["summary"], result["naive"]
    lines = [
        f"Measured by `python -m benchmarks.train` on {m['cpus']} cores ({m['cpu_model']}), "
        f"{m['memory_gib']} GiB RAM; `{MODEL}` model, global batch {GLOBAL_BATCH:,}, the first "
        f"{result['rows']['train']:,} training rows{' (--quick)' if result['quick'] else ''}. "
        f"Naive: {naive['steps']} timed steps after {naive['warmup_steps']} warm-up; tuned: 1 epoch.",
        "",
        "| setup | processes | threads/process | samples/s | data-wait | vs naive |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in [naive, *result["tuned"]]:
        label = (
            "naive (per-sample Dataset, default collate, dense tables, AdamW)"
            if r["setup"] == "naive"
            else f"tuned trainer (torchrun, micro-batch {r['micro_batch']}, "
            f"{r['num_workers']} loader worker(s))"
        )
        lines.append(
            f"| {label} | {r['processes']} | {r['threads']} | {r['samples_per_s']:,.0f} | "
            f"{100 * r['data_wait_fraction']:.1f}% | "
            f"{rate(r['samples_per_s'], naive['samples_per_s']):.2f}x |"
        )
    lines.append("")
    if "speedup" in s:
        lines.append(
            f"- tuned / naive samples/s, 1 process (goal: >= {TARGET_SPEEDUP:.0f}x; measured: "
            f"**{s['speedup']:.2f}x**); tuned data-wait (goal: <= {100 * TARGET_WAIT:.0f}%; "
            f"measured: {100 * s['tuned_data_wait_fraction']:.1f}%)"
        )
    if "scaling_efficiency" in s:
        lines.append(
            f"- 2 processes vs 1 at the same global batch: scaling efficiency "
            f"**{s['scaling_efficiency']:.2f}** (samples/s at 2 / (2 x samples/s at 1)) on "
            f"{m['cpus']} cores"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    p = dataset_benchmark_parser(__doc__, "train")
    p.add_argument(
        "--rows",
        type=int,
        default=None,
        help="first N train rows used by every run (0 = all; default 200000, --quick 2048)",
    )
    p.add_argument(
        "--eval-rows",
        type=int,
        default=None,
        help="val/test rows kept (validation runs after the epoch, not timed; default 20000)",
    )
    p.add_argument(
        "--naive-steps", type=int, default=None, help="timed naive steps (default 30, --quick 2)"
    )
    p.add_argument(
        "--naive-warmup", type=int, default=None, help="untimed naive steps first (default 2)"
    )
    p.add_argument(
        "--naive-seconds", type=float, default=180.0, help="stop the naive run after this long"
    )
    p.add_argument(
        "--workers", type=int, default=1, help="loader workers per tuned training process"
    )
    p.add_argument("--nprocs", default="1,2", help="process counts of the tuned runs")
    p.add_argument(
        "--work", default=None, help="folder for the subset and run outputs (default: a temp dir)"
    )
    return p


def _runs(src: Path, args: argparse.Namespace) -> tuple[dict, dict, list[dict]]:
    """The naive run, then the tuned ones, on a subset of ``src``: ``(rows taken, naive, tuned)``."""
    rows = args.rows if args.rows is not None else (2048 if args.quick else 200_000)
    eval_rows = args.eval_rows if args.eval_rows is not None else (512 if args.quick else 20_000)
    naive_steps = args.naive_steps or (2 if args.quick else 30)
    naive_warmup = args.naive_warmup if args.naive_warmup is not None else (1 if args.quick else 2)
    nprocs = [int(n) for n in args.nprocs.split(",") if n.strip()]

    with tempfile.TemporaryDirectory(prefix="bench-train-", dir=args.work) as tmp:
        work = Path(tmp)
        meta = subset_dataset(src, work / "data", rows, eval_rows)
        data = work / "data"
        taken = meta.document["benchmark_subset"]["rows"]
        print(
            f"  {taken['train']:,} training rows ({math.ceil(taken['train'] / GLOBAL_BATCH)} steps of "
            f"{GLOBAL_BATCH}) from {src}",
            flush=True,
        )
        # the naive run goes first, in this process, with torch's default threads untouched
        naive = run_naive(data, naive_steps, naive_warmup, args.naive_seconds)
        print(
            f"  naive        {naive['samples_per_s']:10,.0f} samples/s  data-wait "
            f"{100 * naive['data_wait_fraction']:5.1f}%  "
            f"({naive['steps']} steps, {naive['threads']} threads)",
            flush=True,
        )
        tuned = []
        for nproc in nprocs:
            r = run_tuned(data, work, nproc, args.workers)
            tuned.append(r)
            print(
                f"  tuned x{nproc}     {r['samples_per_s']:10,.0f} samples/s  data-wait "
                f"{100 * r['data_wait_fraction']:5.1f}%",
                flush=True,
            )
    return taken, naive, tuned


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    src = require_dataset(args.data, "train.py")
    taken, naive, tuned = _runs(src, args)
    result = {
        "benchmark": NAME,
        "machine": machine(),
        "quick": args.quick,
        "data": str(src),
        "model": MODEL,
        "global_batch": GLOBAL_BATCH,
        "rows": taken,
        "naive": naive,
        "tuned": tuned,
        "summary": summarize(naive, tuned),
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
