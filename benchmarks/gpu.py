"""Benchmark: the ``prod`` model on one CUDA GPU: bf16 vs fp32 samples/s, MFU, memory and time vs the estimate.

Synthetic random batches made on the device (no dataset, no loader: this is
the model's own speed), the ``prod`` config at its reference vocab
(``REFERENCE_VOCAB["prod"]``), dense embedding tables (what the trainer uses
with NCCL) and fused AdamW (``components.train.optim.Optimizers``), gradient
clipping as the trainer does. For each precision: ``--warmup`` untimed steps,
then ``--steps`` timed ones between CUDA events; peak memory is
``torch.cuda.max_memory_allocated`` of that precision's run (model, optimizer
state and activations).

MFU = model FLOPs per sample x samples/s / the GPU's peak dense bf16 FLOP/s
(for the fp32 run too, so both are on one scale). FLOPs per sample are counted
with ``torch.utils.flop_counter.FlopCounterMode`` over one forward + backward
(matrix products and attention; embedding lookups count 0), and checked
against the analytic count (``analytic_flops``). Peaks come from a small
table by device name (vendor datasheets, dense, no sparsity) or
``--peak-flops``.

A bf16 sweep over micro-batch sizes (``--batches``), the step run as GPU plans run it
(``--sweep-mode``, default the estimate's ``compile`` for a GPU: torch.compile with CUDA
graphs), then compares, per size, the estimate's memory model (``memory_breakdown``: tensors +
workspace, the batches on the device) with ``torch.cuda.max_memory_allocated`` and
``max_memory_reserved``, and the estimate's modelled step time (``time_model`` with the
device's hardware profile) with the measured one. From the sweep it derives the constants the
hardware profile's time model needs (``constants``: MFU at each size, the step-time floor at
the smallest, samples/s), to replace the cited ones in
``components/estimate/hardware/<profile>.json`` (each with this file as its source). Last, the
step as each of the trainer's ``compile`` settings runs it (``--modes``: eager,
``torch.compile``, and compiled with CUDA graphs, ``reduce-overhead``) in bf16 at each
micro-batch of ``--mode-batches``: the step floor and samples/s per mode. One run takes a few minutes on
an H200.

    python -m benchmarks.gpu               # needs CUDA; writes benchmarks/results/gpu.json
    python -m benchmarks.gpu --dry         # CPU, tiny vocab, 2 steps: proves the script runs
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.measure import machine
from benchmarks.readme import NO_README_HELP, publish, rate
from components.common.plan import GPU_COMPILE, TrainPlan
from components.estimate.hardware import HardwareError, load_profile
from components.estimate.memory import MemorySetup, batch_bytes_per_sample, memory_breakdown
from components.estimate.timemodel import (
    OPTIMIZER_BYTES_PER_PARAM,
    embedding_bytes_per_sample,
    flops_per_sample,
    time_model,
)
from components.train.model import (
    REFERENCE_VOCAB,
    ModelConfig,
    Vocab,
    build_model,
    count_parameters,
    model_config,
)
from components.train.optim import Optimizers
from components.train.runtime import autocast_for, compiled

NAME = "gpu"
MODEL = "prod"
DRY_VOCAB = dataclasses.replace(REFERENCE_VOCAB[MODEL], item=4096, category=256, user=4096)

PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    # (substring of torch.cuda.get_device_name(), dense bf16 FLOP/s); first match wins
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    ("H800", 989e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10G", 70e12),
]


PROFILES: list[tuple[str, str]] = [
    # (substring of the device name, hardware profile); first match wins
    ("H200", "h200-141gb"),
    ("H100", "h100-80gb"),
    ("A100-SXM4-80GB", "a100-80gb"),
    ("A100 80GB", "a100-80gb"),
    ("A100", "a100-40gb"),
]
BATCHES = "256,1024,4096,16384"
MODES = "off,default,reduce-overhead"
PLAN_MODE = GPU_COMPILE
"""The ``compile`` setting the estimate gives a GPU plan: the sweep against the estimate and the
profile's constants measure the step as such a plan runs it."""
MODE_BATCHES = "256,4096,16384"
SYNTHETIC_BATCHES = 4  # measure() keeps this many batches on the device


def peak_for(name: str) -> float | None:
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)


def profile_for(name: str, given: str | None) -> str | None:
    return given or next((profile for key, profile in PROFILES if key in name), None)


def synthetic_batches(
    vocab: Vocab, rows: int, count: int, device: torch.device, seed: int = 0
) -> list[dict]:
    """``count`` random batches of the batch contract, right-aligned histories of random length."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    length = vocab.seq_len

    def ints(high: int, shape: tuple, low: int = 1) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=g, device=device)

    batches = []
    for _ in range(count):
        hist_len = ints(length + 1, (rows,))
        valid = torch.arange(length, device=device) >= (length - hist_len).unsqueeze(1)
        neg_len = ints(vocab.neg_len + 1, (rows,), 0)
        neg_valid = torch.arange(vocab.neg_len, device=device) >= (
            vocab.neg_len - neg_len
        ).unsqueeze(1)
        batches.append(
            {
                "hist_item": ints(vocab.item, (rows, length)) * valid,
                "hist_cat": ints(vocab.category, (rows, length)) * valid,
                "hist_gap": ints(vocab.gap, (rows, length)) * valid,
                "hist_len": hist_len,
                "neg_item": ints(vocab.item, (rows, vocab.neg_len)) * neg_valid,
                "neg_cat": ints(vocab.category, (rows, vocab.neg_len)) * neg_valid,
                "neg_gap": ints(vocab.gap, (rows, vocab.neg_len)) * neg_valid,
                "neg_len": neg_len,
                "dense": torch.randn(rows, vocab.dense, generator=g, device=device),
                "target_item": ints(vocab.item, (rows,)),
                "target_cat": ints(vocab.category, (rows,)),
                "user": ints(vocab.user, (rows,)),
                "context": torch.stack(
                    [ints(vocab.hour, (rows,), 0), ints(vocab.dow, (rows,), 0)], dim=1
                ),
                "label": (torch.rand(rows, generator=g, device=device) < 0.05).float(),
            }
        )
    return batches


def analytic_flops(config: ModelConfig, seq_len: int) -> int:
    """Forward + backward FLOPs of one sample: the estimate's own count (``flops_per_sample``)."""
    return int(flops_per_sample(config, dataclasses.replace(DRY_VOCAB, seq_len=seq_len)))


def counted_flops(config: ModelConfig, seq_len: int, rows: int = 8) -> float:
    """Forward + backward FLOPs per sample by FlopCounterMode (fp32, CPU, a tiny vocab: lookups cost 0)."""
    vocab = dataclasses.replace(DRY_VOCAB, seq_len=seq_len)
    model = build_model(config, vocab, sparse=False)
    model.train()
    batch = synthetic_batches(vocab, rows, 1, torch.device("cpu"))[0]
    with FlopCounterMode(display=False) as counter:
        model(batch).sum().backward()
    return counter.get_total_flops() / rows


def _timed(step, batches: list[dict], warmup: int, steps: int, device: torch.device):
    """``warmup`` untimed then ``steps`` timed calls of ``step``: ``(seconds, peak memory, what
    measured it, the allocator's reserved peak or None)`` (CUDA events and the allocator's peak
    on a GPU, wall time and the process's peak RSS on CPU)."""
    cuda = device.type == "cuda"
    for i in range(warmup):
        step(batches[i % len(batches)])
    if cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    if not cuda:
        seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return seconds, peak, "process_max_rss", None
    end.record()
    torch.cuda.synchronize(device)
    seconds = start.elapsed_time(end) / 1000
    peak, kind = torch.cuda.max_memory_allocated(device), "cuda_max_memory_allocated"
    return seconds, peak, kind, int(torch.cuda.max_memory_reserved(device))


def measure(
    precision: str,
    vocab: Vocab,
    batch: int,
    steps: int,
    warmup: int,
    device: torch.device,
    seed: int = 0,
    mode: str = "off",
) -> dict:
    """samples/s and peak memory of ``steps`` training steps of the prod model in ``precision``,
    its forward and backward run as the trainer runs them with ``compile`` = ``mode``."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(seed)
    model = build_model(MODEL, vocab, sparse=False).to(device)
    model.train()
    stepped = compiled(model, mode)
    plan = TrainPlan(
        model=MODEL, micro_batch=batch, precision=precision, sparse_embeddings="off", seed=seed
    )
    optim = Optimizers(model, plan, warmup + steps)
    dense = list(model.dense_parameters())
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    batches = synthetic_batches(vocab, batch, 4, device, seed)

    def step(b: dict) -> None:
        with autocast_for(precision, device):
            logits = stepped(b)
        loss = loss_fn(logits.float(), b["label"]) / batch
        loss.backward()
        torch.nn.utils.clip_grad_norm_(dense, plan.grad_clip)
        optim.step(None)
        optim.zero_grad()

    seconds, peak, kind, reserved = _timed(step, batches, warmup, steps, device)
    return {
        "precision": precision,
        "mode": mode,
        "batch": batch,
        "steps": steps,
        "warmup_steps": warmup,
        "seconds": round(seconds, 6),
        "step_ms": 1000 * seconds / steps,
        "samples_per_s": rate(batch * steps, seconds),
        "peak_memory_bytes": int(peak),
        "peak_memory_reserved_bytes": reserved,
        "peak_memory_kind": kind,
    }


def _predicted_step(run: dict, vocab: Vocab, profile_name: str) -> dict:
    """The profile's time model for this run's step next to the measured one (nothing for a
    profile that does not load)."""
    config = model_config(MODEL)
    try:
        profile = load_profile(profile_name)
    except HardwareError:
        return {}
    params = count_parameters(MODEL, vocab)
    t = time_model(
        profile=profile,
        flops=flops_per_sample(config, vocab),
        micro_batch=run["batch"],
        grad_accum=1,
        nproc=1,
        nnodes=1,
        reduced_bytes=0,
        optimizer_params=params["total"],
        embedding_bytes=embedding_bytes_per_sample(config, vocab, sparse=False),
        steps_per_epoch=1,
        val_rows=0,
        checkpoint_bytes=0,
        max_epochs=1,
        max_lost_seconds=600,
        mfu=profile.mfu,
    )
    return {
        "profile": profile_name,
        "predicted_step_ms": 1000 * t["step_seconds"],
        "bound": t["bound"],
        "step_error": (t["step_seconds"] * 1000 - run["step_ms"]) / run["step_ms"],
        "optimizer_bytes_per_step": params["total"] * OPTIMIZER_BYTES_PER_PARAM,
    }


def against_estimate(run: dict, vocab: Vocab, profile_name: str | None) -> dict:
    """The estimate's memory and step time for this run's setup next to the measured ones."""
    config = model_config(MODEL)
    setup = MemorySetup(
        config=config,
        vocab=vocab,
        micro_batch=run["batch"],
        precision=run["precision"],
        sparse=False,
        device="cuda",
    )
    terms = memory_breakdown(setup)["terms"]
    # what the caching allocator holds here: model state, activations, workspace and the batches made on
    # the device (no loader, no CUDA context: neither is in the allocator's statistics)
    predicted = sum(
        terms[k]["total"]
        for k in (
            "weights",
            "gradients",
            "optimizer",
            "autocast_copies",
            "ddp_buckets",
            "activations",
            "workspace",
        )
    ) + SYNTHETIC_BATCHES * run["batch"] * batch_bytes_per_sample(vocab)
    out = {
        "predicted_bytes": predicted,
        "allocated_error": (predicted - run["peak_memory_bytes"]) / run["peak_memory_bytes"],
    }
    if run.get("peak_memory_reserved_bytes"):
        out["reserved_error"] = (predicted - run["peak_memory_reserved_bytes"]) / run[
            "peak_memory_reserved_bytes"
        ]
    if profile_name:
        out |= _predicted_step(run, vocab, profile_name)
    return out


def constants(sweep: list[dict], peak: float | None, flops: float) -> dict:
    """What the hardware profile's time model needs, measured on the sweep (the step as GPU
    plans run it): MFU per size, MFU at the fastest size and the step floor at the smallest."""
    smallest = min(sweep, key=lambda r: r["batch"])
    best = max(sweep, key=lambda r: r["samples_per_s"])
    return {
        "mode": best["mode"],
        "mfu_by_batch": {
            str(r["batch"]): (flops * r["samples_per_s"] / peak if peak else None) for r in sweep
        },
        "mfu": flops * best["samples_per_s"] / peak if peak else None,
        "samples_per_s": best["samples_per_s"],
        "at_batch": best["batch"],
        "step_latency_seconds": smallest["step_ms"] / 1000,
        "step_latency_batch": smallest["batch"],
        "note": "mfu and samples_per_s at the fastest micro-batch; step_latency_seconds = the step at the "
        "smallest (an upper bound on the floor); each of the step as GPU plans run it (compile = "
        "mode). Put them in the device's hardware profile with benchmarks/results/gpu.json as "
        "their source.",
    }


def _precision_table(result: dict) -> list[str]:
    """The model and device, then each precision's speed, MFU and peak memory."""
    dev, params = result["device"], result["parameters"]
    peak = result["peak_flops"]
    lines = [
        f"Measured by `python -m benchmarks.gpu` on {dev['name']} (torch {dev['torch']}): `{MODEL}` model "
        f"({params['total'] / 1e6:.1f} M parameters, {params['dense'] / 1e6:.2f} M outside the embedding "
        f"tables), dense tables + fused AdamW, synthetic batches of {result['batch']:,}, "
        f"{result['flops_per_sample'] / 1e6:.1f} MFLOP per sample (forward + backward); MFU against "
        + (
            f"{peak / 1e12:.0f} TFLOP/s dense bf16 ({result['peak_flops_source']})."
            if peak
            else "no known peak (pass --peak-flops)."
        ),
        "",
        "| precision | samples/s | step (ms) | achieved TFLOP/s | MFU | peak memory (GiB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["runs"]:
        mfu = f"{100 * r['mfu']:.2f}%" if r["mfu"] is not None else "n/a"
        lines.append(
            f"| {r['precision']} | {r['samples_per_s']:,.0f} | {r['step_ms']:.2f} | "
            f"{r['achieved_flops'] / 1e12:.2f} | {mfu} | {r['peak_memory_bytes'] / 2**30:.2f} |"
        )
    if result.get("bf16_speedup"):
        lines += ["", f"- bf16 autocast / fp32: **{result['bf16_speedup']:.2f}x** samples/s"]
    return lines


def _sweep_table(result: dict) -> list[str]:
    """The bf16 micro-batch sweep against the estimate's step time and memory."""
    lines = [
        f"bf16 micro-batch sweep against the estimate (compile = "
        f"{result.get('sweep_mode', 'off')}; memory: tensors + workspace + on-device batches; "
        "step: the hardware profile's time model):",
        "",
        "| micro-batch | samples/s | step (ms) | predicted step (ms) | MFU | allocated (GiB) | "
        "reserved (GiB) | predicted (GiB) | error vs reserved |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["sweep"]:
        e = r["estimate"]
        reserved = r.get("peak_memory_reserved_bytes")
        lines.append(
            f"| {r['batch']:,} | {r['samples_per_s']:,.0f} | {r['step_ms']:.2f} | "
            + (f"{e['predicted_step_ms']:.2f} | " if "predicted_step_ms" in e else "— | ")
            + (f"{100 * r['mfu']:.2f}% | " if r["mfu"] is not None else "n/a | ")
            + f"{r['peak_memory_bytes'] / 2**30:.2f} | "
            + (f"{reserved / 2**30:.2f} | " if reserved else "— | ")
            + f"{e['predicted_bytes'] / 2**30:.2f} | "
            + (f"{e['reserved_error']:+.1%} |" if "reserved_error" in e else "— |")
        )
    return lines


def _mode_table(result: dict) -> list[str]:
    """The step under each compile setting (nothing when none was compared)."""
    if not result.get("modes"):
        return []
    return [
        "The step as the trainer's `compile` setting runs it (bf16):",
        "",
        "| compile | micro-batch | samples/s | step (ms) |",
        "|---|---:|---:|---:|",
        *[
            f"| {r['mode']} | {r['batch']:,} | {r['samples_per_s']:,.0f} | {r['step_ms']:.2f} |"
            for r in result["modes"]
        ],
    ]


def _constants_line(result: dict) -> list[str]:
    """The profile constants the sweep measured (nothing without a known peak)."""
    c = result["constants"]
    if c.get("mfu") is None:
        return []
    return [
        f"- measured constants for the `{result.get('profile')}` profile: MFU {c['mfu']:.3f} at "
        f"micro-batch {c['at_batch']:,} ({c['samples_per_s']:,.0f} samples/s); step floor "
        f"<= {1000 * c['step_latency_seconds']:.2f} ms (micro-batch {c['step_latency_batch']})"
    ]


def readme_table(result: dict) -> str:
    """The published block from the stored results file."""
    sections = (_precision_table, _sweep_table, _mode_table, _constants_line)
    return "\n\n".join("\n".join(lines) for lines in (f(result) for f in sections) if lines)


def _parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--dry",
        action="store_true",
        help="CPU, tiny vocab, 2 steps: check the script end to end (no published block; "
        "results to a temp file unless --results)",
    )
    p.add_argument(
        "--batch", type=int, default=None, help="samples per step (default 4096, --dry 32)"
    )
    p.add_argument(
        "--steps", type=int, default=None, help="timed steps per precision (default 50, --dry 2)"
    )
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed steps first (default 10, --dry 1)"
    )
    p.add_argument(
        "--precisions",
        default="fp32,bf16",
        help="precisions compared at --batch (default fp32,bf16)",
    )
    p.add_argument(
        "--batches",
        default=None,
        help=f"bf16 micro-batch sweep against the estimate (default {BATCHES}; --dry 8,32)",
    )
    p.add_argument(
        "--sweep-mode",
        default=None,
        help=f"compile setting of the sweep (default {PLAN_MODE}, as GPU plans run; --dry off)",
    )
    p.add_argument(
        "--modes",
        default=None,
        help=f"the trainer's compile settings compared (default {MODES}; --dry off)",
    )
    p.add_argument(
        "--mode-batches",
        default=None,
        help=f"bf16 micro-batches of the compile comparison (default {MODE_BATCHES}; --dry 8)",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="hardware profile of the estimate (default: by device name, e.g. h200-141gb)",
    )
    p.add_argument(
        "--peak-flops", type=float, default=None, help="peak dense bf16 FLOP/s of the GPU"
    )
    p.add_argument(
        "--results",
        default=None,
        help="JSON output (default: benchmarks/results/gpu.json; --dry: a temp file)",
    )
    p.add_argument("--no-readme", action="store_true", help=NO_README_HELP)
    return p


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every timed run of one invocation shares: the device, the vocabulary, the steps,
    the FLOPs per sample and the device's peak (None: unknown)."""

    device: torch.device
    name: str
    total_memory: int | None
    vocab: Vocab
    steps: int
    warmup: int
    flops: float
    peak: float | None
    peak_source: str | None

    @classmethod
    def of(cls, args: argparse.Namespace) -> Setup:
        """The CUDA device (or, with ``--dry``, the CPU and a tiny vocabulary) and its peak."""
        if args.dry:
            torch.set_num_threads(1)
            device, vocab = torch.device("cpu"), DRY_VOCAB
            name, total_memory = "cpu (--dry)", None
        else:
            device = torch.device("cuda", torch.cuda.current_device())
            vocab = REFERENCE_VOCAB[MODEL]
            props = torch.cuda.get_device_properties(device)
            name, total_memory = props.name, props.total_memory
        if args.peak_flops:
            peak, source = args.peak_flops, "--peak-flops"
        else:
            peak = None if args.dry else peak_for(name)
            source = "datasheet table" if peak else None
        return cls(
            device=device,
            name=name,
            total_memory=total_memory,
            vocab=vocab,
            steps=args.steps or (2 if args.dry else 50),
            warmup=args.warmup if args.warmup is not None else (1 if args.dry else 10),
            flops=counted_flops(model_config(MODEL), vocab.seq_len),
            peak=peak,
            peak_source=source,
        )

    def device_info(self) -> dict:
        """The device and the torch and CUDA versions, as the results file records them."""
        return {
            "name": self.name,
            "type": self.device.type,
            "total_memory_bytes": self.total_memory,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
        }

    def measure(self, precision: str, batch: int, mode: str = "off") -> dict:
        """One timed run (:func:`measure`) on this setup."""
        return measure(
            precision, self.vocab, batch, self.steps, self.warmup, self.device, mode=mode
        )

    def with_mfu(self, r: dict) -> dict:
        """The run with its achieved FLOP/s and model FLOPs utilization (None without a peak)."""
        r["achieved_flops"] = self.flops * r["samples_per_s"]
        r["mfu"] = r["achieved_flops"] / self.peak if self.peak else None
        return r


def _precision_runs(setup: Setup, precisions: str, batch: int) -> list[dict]:
    """Each precision at ``batch``."""
    runs = []
    for precision in [s.strip() for s in precisions.split(",") if s.strip()]:
        r = setup.with_mfu(setup.measure(precision, batch))
        runs.append(r)
        print(
            f"  {precision:5s} {r['samples_per_s']:12,.0f} samples/s  {r['step_ms']:8.2f} ms/step  "
            f"peak {r['peak_memory_bytes'] / 2**30:6.2f} GiB"
            + (f"  MFU {100 * r['mfu']:.2f}%" if r["mfu"] is not None else ""),
            flush=True,
        )
    return runs


def _sweep(setup: Setup, sizes: list[int], mode: str, profile_name: str | None) -> list[dict]:
    """bf16 at each micro-batch in ``sizes``, each against the estimate's prediction."""
    sweep = []
    for size in sizes:
        r = setup.with_mfu(setup.measure("bf16", size, mode=mode))
        r["estimate"] = against_estimate(r, setup.vocab, profile_name)
        sweep.append(r)
        e = r["estimate"]
        print(
            f"  bf16 {mode} x{size:6d} {r['samples_per_s']:12,.0f} samples/s  {r['step_ms']:8.2f} ms/step"
            + (f" (model {e['predicted_step_ms']:.2f})" if "predicted_step_ms" in e else "")
            + f"  allocated {r['peak_memory_bytes'] / 2**30:6.2f} GiB vs predicted "
            f"{e['predicted_bytes'] / 2**30:6.2f} GiB",
            flush=True,
        )
    return sweep


def _mode_runs(setup: Setup, modes: list[str], sizes: list[int]) -> list[dict]:
    """bf16 under each of the trainer's compile settings, at each micro-batch in ``sizes``."""
    by_mode = []
    for mode in modes:
        for size in sizes:
            r = setup.measure("bf16", size, mode=mode)
            by_mode.append(r)
            print(
                f"  bf16 {mode:16s} x{size:6d} {r['samples_per_s']:12,.0f} samples/s  "
                f"{r['step_ms']:8.2f} ms/step",
                flush=True,
            )
    return by_mode


def _batches(text: str) -> list[int]:
    """Micro-batches given as a comma-separated list."""
    return [int(b) for b in text.split(",") if b.strip()]


def _bf16_speedup(runs: list[dict]) -> float | None:
    """bf16's samples/s over fp32's (None unless both ran)."""
    by = {r["precision"]: r for r in runs}
    if "bf16" in by and "fp32" in by:
        return rate(by["bf16"]["samples_per_s"], by["fp32"]["samples_per_s"])
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.dry and not torch.cuda.is_available():
        print(
            "gpu.py: error: no CUDA device (torch.cuda.is_available() is False); "
            "--dry checks the script on CPU",
            file=sys.stderr,
        )
        return 2
    batch = args.batch or (32 if args.dry else 4096)
    setup = Setup.of(args)
    runs = _precision_runs(setup, args.precisions, batch)
    sizes = _batches(args.batches or ("8,32" if args.dry else BATCHES))
    profile_name = profile_for(setup.name, args.profile) if not args.dry else args.profile
    sweep_mode = args.sweep_mode or ("off" if args.dry else PLAN_MODE)
    sweep = _sweep(setup, sizes, sweep_mode, profile_name)
    modes = [m.strip() for m in (args.modes or ("off" if args.dry else MODES)).split(",") if m]
    mode_sizes = _batches(args.mode_batches or ("8" if args.dry else MODE_BATCHES))
    by_mode = _mode_runs(setup, modes, mode_sizes)
    result = {
        "benchmark": NAME,
        "dry": args.dry,
        "machine": machine(),
        "device": setup.device_info(),
        "model": MODEL,
        "vocab": dataclasses.asdict(setup.vocab),
        "parameters": count_parameters(MODEL, setup.vocab),
        "sparse_embeddings": False,
        "optimizer": "AdamW(fused=True)",
        "batch": batch,
        "steps": setup.steps,
        "warmup_steps": setup.warmup,
        "flops_per_sample": setup.flops,
        "analytic_flops_per_sample": analytic_flops(model_config(MODEL), setup.vocab.seq_len),
        "peak_flops": setup.peak,
        "peak_flops_source": setup.peak_source,
        "runs": runs,
        "sweep": sweep,
        "profile": profile_name,
        "sweep_mode": sweep_mode,
        "constants": constants(sweep, setup.peak, setup.flops) if sweep else {},
        "modes": by_mode,
        "step_floor_ms_by_mode": {
            mode: min(r["step_ms"] for r in by_mode if r["mode"] == mode)
            for mode in {r["mode"] for r in by_mode}
        },
        "bf16_speedup": _bf16_speedup(runs),
    }
    publish(
        NAME,
        result,
        readme_table(result),
        args.results,
        throwaway=args.dry,
        readme=not args.no_readme,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
