"""The estimate stage: from a dataset, a model config and a hardware profile to a plan.json.

:func:`estimate` is a pure function of an :class:`EstimateConfig` (it reads the
dataset's meta.json and the profile; with ``probe=True`` it also runs a few real
training steps on this machine) and returns the plan document; :func:`estimate_and_write`
writes it through ``components.common.plan.write_plan``.

Choices (each gets a one-line ``rationale`` entry in the plan):

* precision: bf16 where the profile supports it, else fp32 (cpu-local: fp32);
* sparse_embeddings ``auto``: sparse item/user tables with gloo (CPU), dense with NCCL;
* world size: on GPUs, the fewest devices (1, 2, 4, 8 in a node, then whole
  nodes) that finish ``max_epochs`` epochs within ``deadline_hours``; without a
  deadline, one GPU. On cpu-local one process per core (1 intra-op thread, 0
  loader workers: the rule and its evidence are in docs/tuning.md);
* micro_batch: the largest power of two whose peak memory (memory.py) fits under
  ``memory_fraction`` of the device and divides the per-process batch;
  activation checkpointing only if micro-batch 1 does not fit without it;
* grad_accum = global_batch / (micro_batch × world);
* lr = base_lr × global_batch / base_batch (linear scaling), 5% warmup; when ``model`` is a
  tuned config file (components/tune), its ``train`` block replaces base_lr / base_batch /
  warmup_fraction and sets weight_decay;
* time (:func:`time_model`): start-up + epochs x (steps x step time + validation +
  checkpoint writes). A micro-step takes the longest of its compute (FLOPs at the
  profile's ``mfu``), its memory traffic (embedding rows gathered, written back and
  updated; the dense optimizer's reads and writes) at ``memory_efficiency`` of the
  memory bandwidth, and the profile's per-step latency floor; several processes
  run at ``parallel_efficiency`` and add a ring all-reduce per optimizer step. Where
  the hardware is present (``probe`` None = auto: cpu-local here, a GPU profile on a
  CUDA machine) the probe's measured step and validation rates replace the modelled
  ones. Every constant names its source in the profile;
* patience (:func:`choose_patience`) so early stopping can act within ``max_epochs``;
  checkpoint_every_steps (:func:`checkpoint_interval`) so a preemption loses at most
  ``max_lost_minutes`` of training.

Infeasible requests raise :class:`InfeasibleError` with the numbers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.dataset_meta import DatasetMeta
from components.common.plan import GPU_COMPILE, TrainPlan, write_plan
from components.estimate.config import EstimateConfig, EstimateError, InfeasibleError
from components.estimate.hardware import TIME_FIELDS, HardwareProfile, load_profile
from components.estimate.memory import (
    FP32,
    MemorySetup,
    memory_breakdown,
    parameter_split,
)
from components.estimate.rationale import rate_note, rationale
from components.estimate.rows import negative_share, trained_rows
from components.estimate.table import gb
from components.estimate.timemodel import (
    CHECKPOINT_BYTES_PER_PARAM,
    checkpoint_buffer_bytes,
    choose_patience,
    embedding_bytes_per_sample,
    flops_per_sample,
    time_model,
    world_candidates,
)
from components.train.model import ModelConfig, Vocab, model_config

MAX_MICRO_BATCH = 1 << 15
"""Rows per micro-batch at most. cuDNN's fused attention takes batches below 2^16 only: at
65,536 the compiled step failed in its backward on an H200 (PyTorch issue 181085), while 32,768
ran within 5% of the throughput plateau (docs/performance.md)."""


# ----------------------------------------------------------------------------- choices


def setup_for(
    config: ModelConfig,
    vocab: Vocab,
    profile: HardwareProfile,
    *,
    micro: int,
    accum: int,
    world: int,
    precision: str,
    checkpointing: bool,
    num_workers: int,
    prefetch: int,
    mapped_bytes: int = 0,
) -> MemorySetup:
    return MemorySetup(
        config=config,
        vocab=vocab,
        micro_batch=micro,
        grad_accum=accum,
        world_size=world,
        precision=precision,
        activation_checkpointing=checkpointing,
        sparse=not profile.is_gpu,
        device="cuda" if profile.is_gpu else "cpu",
        num_workers=num_workers,
        prefetch_factor=prefetch,
        runtime_bytes=profile.process_baseline_bytes,
        mapped_bytes=0 if profile.is_gpu else mapped_bytes,
        checkpoint_bytes=0 if profile.is_gpu else checkpoint_buffer_bytes(config, vocab),
    )


def largest_micro_batch(
    config: ModelConfig,
    vocab: Vocab,
    profile: HardwareProfile,
    cap: float,
    per_process: int,
    world: int,
    precision: str,
    checkpointing: bool,
    num_workers: int,
    prefetch: int,
    probe: dict | None = None,
    mapped_bytes: int = 0,
) -> tuple[int, dict] | None:
    """The largest power-of-two micro-batch dividing ``per_process`` whose peak fits under
    ``cap``, with its memory breakdown; None when not even 1 fits."""
    micro = 1
    while micro * 2 <= min(per_process, MAX_MICRO_BATCH) and per_process % (micro * 2) == 0:
        micro *= 2
    while micro >= 1:
        accum = per_process // micro
        setup = setup_for(
            config,
            vocab,
            profile,
            micro=micro,
            accum=accum,
            world=world,
            precision=precision,
            checkpointing=checkpointing,
            num_workers=num_workers,
            prefetch=prefetch,
            mapped_bytes=mapped_bytes,
        )
        breakdown = apply_probe(memory_breakdown(setup), setup, probe)
        if breakdown["total"]["total"] <= cap:
            return micro, breakdown
        micro //= 2
    return None


def apply_probe(breakdown: dict, setup: MemorySetup, probe: dict | None) -> dict:
    """Where a probe measured the activation bytes per sample, use them instead of the model's."""
    if not probe or probe.get("activation_bytes_per_sample") is None:
        return breakdown
    measured = probe["activation_bytes_per_sample"] * setup.micro_batch
    modelled = breakdown["terms"]["activations"]["total"]
    delta = int(measured - modelled)
    out = {**breakdown, "probe_adjustment_bytes": delta}
    for key in ("total", "resident"):
        out[key] = {
            **breakdown[key],
            "dense": breakdown[key]["dense"] + delta,
            "total": breakdown[key]["total"] + delta,
        }
    return out


def hardware_present(profile: HardwareProfile) -> bool:
    """Whether this machine has the profile's device: a CPU profile always, a GPU one with CUDA."""
    if not profile.is_gpu:
        return True
    import torch

    return torch.cuda.is_available()


def run_probe(config: ModelConfig, vocab: Vocab, profile: HardwareProfile, precision: str) -> dict:
    """Memory of real steps at two micro-batch sizes (synthetic full histories)."""
    import torch

    from components.estimate.probe import probe

    if not hardware_present(profile):
        raise EstimateError(
            f"--probe measures this machine's device, but profile {profile.name} is a "
            f"GPU and no CUDA device is visible here; drop --probe or run it on the GPU"
        )
    torch.set_num_threads(1)
    device = "cuda" if profile.is_gpu else "cpu"
    result = probe(
        config, vocab, sparse=not profile.is_gpu, precision=precision, device=device, timing_steps=0
    )
    if device == "cpu":
        result["activation_bytes_per_sample"] = result["saved_bytes_per_sample"]
    else:  # the slope also holds the per-sample sparse/dense gradient bytes: none on CUDA (dense)
        result["activation_bytes_per_sample"] = result["bytes_per_sample"]
    return result


def run_speed_probe(data: str, plan: TrainPlan, profile: HardwareProfile) -> dict:
    """The trainer's real steps and validation on rows sampled across the dataset, in the plan's
    processes launched as the train stage launches them, on this machine."""
    from components.estimate.probe import probe_launch

    try:
        return probe_launch(data, plan, device="cuda" if profile.is_gpu else "cpu")
    except ValueError as exc:
        raise EstimateError(f"--probe: {exc}") from None


@dataclass
class Candidate:
    """One world size's plan shape (what fits in memory) and, once timed, its predicted seconds."""

    nproc: int
    nnodes: int
    micro: int
    accum: int
    checkpointing: bool
    breakdown: dict
    """The memory model's peak per device at `micro`, term by term."""
    flops: float
    """Training FLOPs of one sample."""
    times: dict = field(default_factory=lambda: {"checkpoint_every_steps": 0})
    """:func:`time_model`'s terms (until timed: no mid-epoch checkpoints)."""

    @property
    def world(self) -> int:
        return self.nproc * self.nnodes

    @property
    def total_seconds(self) -> float:
        return self.times["total_seconds"]

    def usd(self, profile: HardwareProfile) -> float:
        """What the run costs at ``profile``'s prices: its predicted hours, start-up included."""
        return self.total_seconds / 3600 * profile.usd_per_hour(self.nproc, self.nnodes)


class Planner:
    """What every candidate of one estimate shares (config, hardware profile, dataset, model,
    training settings, the probes' measurements), and the steps that turn them into a plan."""

    def __init__(self, config: EstimateConfig) -> None:
        self.config = config
        self.profile = profile = load_profile(config.hardware)
        self.meta = DatasetMeta.read(config.data)
        self.vocab = Vocab.from_meta(self.meta)
        self.mconf = model_config(config.model)
        train = self.meta.split("train")
        self.negative_keep = negative_share(
            train, config.negative_keep, config.negatives_per_positive
        )
        self.train_rows = trained_rows(train, self.negative_keep)
        self.val_rows = self.meta.split("val").rows
        self.params = parameter_split(self.mconf, self.vocab)
        self.precision = "bf16" if profile.bf16 else "fp32"
        self.gpu = profile.is_gpu
        self.num_workers = min(profile.cpu_cores_per_gpu - 1, 8) if self.gpu else 0
        self.prefetch = 4
        self.cap = config.memory_fraction * profile.memory_bytes
        self.mfu = config.mfu or profile.mfu
        self.probe_on = hardware_present(profile) if config.probe is None else config.probe
        self.probed = (
            run_probe(self.mconf, self.vocab, profile, self.precision) if config.probe else None
        )
        self.mapped = train.rows * self.meta.row_bytes  # an epoch reads every train array
        self.deadline_s = config.deadline_hours * 3600 if config.deadline_hours else None
        self.headroom = 1 + config.deadline_margin
        self.training, self.from_file = config.training()
        self.patience = (
            choose_patience(config.max_epochs) if config.patience is None else config.patience
        )
        self.speed: dict | None = None
        """The launched speed probe's measurement (one for every candidate of a CPU profile)."""
        self.unprobed = None if hardware_present(profile) else "no such device here"
        self.tried: list[str] = []
        self.priced = bool(profile.usd_per_hour(1, 1))
        self.next_cheaper: Candidate | None = None
        """The dearest plan cheaper than the chosen one (each misses the deadline), if any."""

    def plan(self, c: Candidate) -> TrainPlan:
        config, training = self.config, self.training
        return TrainPlan(
            model=config.model,
            micro_batch=c.micro,
            grad_accum=c.accum,
            nproc_per_node=c.nproc,
            nnodes=c.nnodes,
            precision=self.precision,
            activation_checkpointing=c.checkpointing,
            sparse_embeddings="auto",
            compile=GPU_COMPILE if self.gpu else "off",
            lr=training.lr * config.global_batch / training.global_batch,
            warmup_fraction=training.warmup_fraction,
            weight_decay=training.weight_decay,
            max_epochs=config.max_epochs,
            patience=self.patience,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch,
            pin_memory=self.gpu,
            persistent_workers=self.num_workers > 0,
            cpu_threads=1,
            checkpoint_every_steps=c.times["checkpoint_every_steps"],
            max_lost_minutes=config.max_lost_minutes,
            negative_keep=self.negative_keep,
        )

    def fit(self, nproc: int, nnodes: int) -> Candidate | None:
        """The largest micro-batch that fits ``nproc`` x ``nnodes`` (with activation checkpointing only
        when needed); None when the global batch does not divide; InfeasibleError when nothing fits."""
        world, config = nproc * nnodes, self.config
        if config.global_batch % world:
            self.tried.append(
                f"{world} processes (global batch {config.global_batch} not divisible)"
            )
            return None
        per_process = config.global_batch // world
        for checkpointing in (False, True):
            found = largest_micro_batch(
                self.mconf,
                self.vocab,
                self.profile,
                self.cap,
                per_process,
                world,
                self.precision,
                checkpointing,
                self.num_workers,
                self.prefetch,
                self.probed,
                self.mapped,
            )
            if found:
                micro, breakdown = found
                return Candidate(
                    nproc,
                    nnodes,
                    micro,
                    per_process // micro,
                    checkpointing,
                    breakdown,
                    flops_per_sample(self.mconf, self.vocab, checkpointing),
                )
        setup = setup_for(
            self.mconf,
            self.vocab,
            self.profile,
            micro=1,
            accum=per_process,
            world=world,
            precision=self.precision,
            checkpointing=True,
            num_workers=self.num_workers,
            prefetch=self.prefetch,
            mapped_bytes=self.mapped,
        )
        need = apply_probe(memory_breakdown(setup), setup, self.probed)["total"]["total"]
        raise InfeasibleError(
            f"{config.model} does not fit on {self.profile.name}: even micro-batch 1 with activation "
            f"checkpointing needs {gb(need)} per device, above the cap {gb(self.cap)} "
            f"({config.memory_fraction:.0%} of {gb(self.profile.memory_bytes)})"
        )

    def measure(self, c: Candidate) -> None:
        """Run the speed probe once, in ``c``'s processes, where the hardware is here."""
        if not self.probe_on or self.speed is not None:
            return
        try:
            self.speed = run_speed_probe(self.config.data, self.plan(c), self.profile)
        except EstimateError as exc:
            if self.config.probe:  # asked for: say why it cannot be done
                raise
            self.probe_on, self.unprobed = False, str(exc).removeprefix("--probe: ")

    def timed(self, c: Candidate) -> Candidate:
        params, gpu, config = self.params, self.gpu, self.config
        reduced_params = params["total"] if gpu else params["other_tables"] + params["dense"]
        c.times = time_model(
            profile=self.profile,
            flops=c.flops,
            micro_batch=c.micro,
            grad_accum=c.accum,
            nproc=c.nproc,
            nnodes=c.nnodes,
            reduced_bytes=FP32 * reduced_params,
            optimizer_params=reduced_params,
            embedding_bytes=embedding_bytes_per_sample(self.mconf, self.vocab, sparse=not gpu),
            steps_per_epoch=math.ceil(self.train_rows / config.global_batch),
            val_rows=self.val_rows,
            checkpoint_bytes=CHECKPOINT_BYTES_PER_PARAM * params["total"],
            max_epochs=config.max_epochs,
            max_lost_seconds=60 * config.max_lost_minutes,
            mfu=self.mfu,
            measured=self.speed,
        )
        self.tried.append(
            f"{c.world} x {self.profile.name}: {c.total_seconds / 3600:.2f} h"
            + (f", ${c.usd(self.profile):,.2f}" if self.priced else "")
        )
        return c

    def search(self) -> Candidate:
        """The plan to run: on CPU the first world size that fits (one process per core: the
        fastest); on GPUs, of every world size that fits, the cheapest that meets the deadline
        (without one, the cheapest; equal prices: the fewest devices). InfeasibleError with the
        fastest one's numbers when none meets it."""
        timed: list[Candidate] = []
        for nproc, nnodes in world_candidates(self.profile):
            try:
                candidate = self.fit(nproc, nnodes)
            except InfeasibleError:
                if not timed:  # the smallest layout does not fit: nothing will
                    raise
                # more devices add buffers (DDP) a device at the limit has no room for
                self.tried.append(f"{nproc * nnodes} x {self.profile.name}: does not fit")
                continue
            if candidate is None:
                continue
            self.measure(candidate)
            timed.append(self.timed(candidate))
            if not self.gpu:
                break
        if not timed:  # pragma: no cover - CPU candidates end at 1 process, GPUs at 1 device
            raise InfeasibleError(
                f"no world size of {self.profile.name} divides global batch "
                f"{self.config.global_batch}: {'; '.join(self.tried)}"
            )
        meeting = [c for c in timed if self.deadline_s is None or self.meets_deadline(c)]
        if not meeting:
            fastest = min(timed, key=lambda c: c.total_seconds)
            config, t = self.config, fastest.times
            raise InfeasibleError(
                f"deadline {config.deadline_hours:g} h ({self.deadline_s:.3g} s) cannot be met on "
                f"{self.profile.name} (at most {self.profile.max_world} {'devices' if self.gpu else 'processes'}): "
                f"{config.max_epochs} epochs of {self.train_rows:,} rows take {t['total_seconds'] / 3600:.2f} h "
                f"({t['total_seconds']:,.0f} s) at best ({fastest.nproc} per node x {fastest.nnodes} nodes): "
                f"start-up {t['startup_seconds']:,.0f} s + {config.max_epochs} x {t['epoch_seconds']:,.1f} s per "
                f"epoch, {config.deadline_margin:.0%} headroom for the estimate's error; tried {'; '.join(self.tried)}"
            )
        chosen = min(meeting, key=lambda c: (c.usd(self.profile), c.world, c.total_seconds))
        cheaper = [c for c in timed if c.usd(self.profile) < chosen.usd(self.profile)]
        # what the deadline costs: the dearest of the cheaper plans, all of which miss it
        self.next_cheaper = max(cheaper, key=lambda c: c.usd(self.profile), default=None)
        return chosen

    def cost(self, c: Candidate) -> dict[str, Any]:
        """The plan's cost block: predicted dollars and device-hours (start-up included), the
        prices and where they come from, and what the next cheaper plan would have missed by."""
        profile, hours = self.profile, c.total_seconds / 3600
        cheaper = self.next_cheaper
        return {
            "usd": c.usd(profile),
            "usd_per_hour": profile.usd_per_hour(c.nproc, c.nnodes),
            "device_hours": hours * c.world,
            "node_hours": hours * c.nnodes,
            "price_per_device_hour": profile.price_per_device_hour,
            "price_per_node_hour": profile.price_per_node_hour,
            "price_source": profile.price_source,
            "price_date": profile.price_date,
            "next_cheaper": cheaper
            and {
                "nproc_per_node": cheaper.nproc,
                "nnodes": cheaper.nnodes,
                "usd": cheaper.usd(profile),
                "seconds": cheaper.total_seconds,
                # with the headroom the deadline is judged by
                "misses_deadline_by_seconds": cheaper.total_seconds * self.headroom
                - self.deadline_s,
            },
        }

    def meets_deadline(self, c: Candidate) -> bool:
        return c.total_seconds * self.headroom <= self.deadline_s

    def document(self, c: Candidate) -> dict[str, Any]:
        """The plan's ``estimate`` block: every input and every predicted number behind it."""
        config, profile, speed = self.config, self.profile, self.speed
        return {
            "hardware": profile.as_dict(),
            "dataset": {
                "path": str(config.data),
                "train_rows": self.train_rows,
                "val_rows": self.val_rows,
                "fingerprint": self.meta.fingerprint,
                "vocab": dataclasses.asdict(self.vocab),
                "mapped_train_bytes": self.mapped,
            },
            "parameters": self.params,
            "memory": {
                **c.breakdown,
                "cap_bytes": self.cap,
                "device_memory_bytes": profile.memory_bytes,
                "memory_fraction": config.memory_fraction,
            },
            "throughput": {
                "flops_per_sample": c.flops,
                "mfu": None if speed else self.mfu,
                "device_flops": profile.bf16_flops,
                "measured_samples_per_s": speed["samples_per_s"] if speed else None,
                "source": "probe" if speed else "modelled",
                "note": rate_note(self, c),
                "samples_per_s": config.global_batch / c.times["step_seconds"],
            },
            "times": {
                **c.times,
                "epochs_assumed": config.max_epochs,
                "deadline_hours": config.deadline_hours,
                "max_lost_minutes": config.max_lost_minutes,
                "sources": {k: profile.sources.get(k) for k in TIME_FIELDS},
            },
            "cost": self.cost(c),
            "candidates": self.tried,
            "probe": self.probed,
            "speed_probe": speed,
            "config": dataclasses.asdict(config),
        }


def estimate(config: EstimateConfig) -> dict[str, Any]:
    """The plan document ({"train", "rationale", "estimate"}) for ``config``: fit each world size in
    memory, probe and time it, choose, explain."""
    planner = Planner(config)
    chosen = planner.search()
    return {
        "train": planner.plan(chosen),
        "rationale": rationale(planner, chosen),
        "estimate": planner.document(chosen),
    }


def estimate_and_write(config: EstimateConfig, out: str | Path) -> tuple[Path, dict[str, Any]]:
    """Estimate and write plan.json at ``out``; returns the path and the document."""
    doc = estimate(config)
    path = write_plan(out, doc["train"], doc["rationale"], doc["estimate"])
    return path, doc
