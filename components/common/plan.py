"""The training plan: the one format the estimate stage writes and the trainer reads.

``plan.json`` = ``{"format": "dailyrec.plan/v1", "train": {TrainPlan fields},
"rationale": {field: one line}, "estimate": {...}}``. Only ``train`` drives the
run; ``rationale`` and ``estimate`` are for humans and later stages.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.storage import atomic_write_json

PLAN_FORMAT = "dailyrec.plan/v1"
PRECISIONS = ("fp32", "bf16", "fp16")
SPARSE_MODES = ("auto", "on", "off")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
GPU_COMPILE = "reduce-overhead"
"""The compile mode the estimate plans on GPUs: their steps are launch-bound, and CUDA graphs
replay one as a single launch (benchmarks/results/gpu.json); on CPU plans compile nothing."""
MEMORY_FRACTION = 0.88
"""Share of the device memory a plan may use by default (the estimate stage, the tuner's
architecture filter, Katib trials). It tolerates a peak 13.6% above the memory model's;
benchmarks/estimate.py measured -7.9% .. -0.4% against real peak RSS on CPU."""


UPPER = {
    "micro_batch": 1 << 20,
    "grad_accum": 1 << 16,
    "nproc_per_node": 256,
    "nnodes": 1024,
    "max_epochs": 10_000,
    "patience": 10_000,
    "eval_batch": 1 << 20,
    "num_workers": 256,
    "prefetch_factor": 64,
    "cpu_threads": 1024,
    "checkpoint_every_steps": 1 << 31,
    "seed": (1 << 63) - 1,
    "max_lost_minutes": 7 * 24 * 60.0,
    "progress_seconds": 24 * 3600.0,
}
"""The most each count of a plan may ask for: far above any machine or job this runs on, so a
plan past one (10,000 processes per node, a micro-batch of 2^62) is a broken or hostile file,
refused before a process starts or a buffer is sized from it."""


BRIEF = (
    "model",
    "nproc_per_node",
    "nnodes",
    "micro_batch",
    "grad_accum",
    "precision",
    "lr",
    "max_epochs",
    "patience",
    "checkpoint_every_steps",
    "num_workers",
    "negative_keep",
)
"""The plan's settings a person reads first, in this order."""


@dataclass(frozen=True)
class TrainPlan:
    """Every setting of a training run that resources or tuning decide."""

    model: str = "debug"
    """Named model config (see components/train/model.py: debug, local, prod)."""
    micro_batch: int = 256
    """Samples per process per forward/backward."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step."""
    nproc_per_node: int = 1
    """Training processes per node (GPUs per node on CUDA)."""
    nnodes: int = 1
    """Nodes."""
    precision: str = "fp32"
    """fp32 | bf16 (autocast) | fp16 (autocast + GradScaler)."""
    activation_checkpointing: bool = False
    """Recompute encoder activations in backward to save memory."""
    sparse_embeddings: str = "auto"
    """auto (sparse with gloo, dense with NCCL) | on | off."""
    compile: str = "off"
    """torch.compile of the training step's model: off (eager) | default (Inductor's fused
    kernels) | reduce-overhead (also CUDA graphs: a step replays as one launch, for the small
    steps a GPU is launch-bound on) | max-autotune. Needs dense embeddings (sparse gradients do
    not compile). The estimate chooses reduce-overhead on GPUs, off on CPU (no gain measured)."""
    lr: float = 1e-3
    """Peak learning rate (already scaled for the global batch)."""
    weight_decay: float = 0.01
    """AdamW weight decay (dense parameters)."""
    warmup_fraction: float = 0.05
    """Share of all optimizer steps spent in linear warmup before cosine decay."""
    embedding_l2: float = 0.5
    """Mini-batch-aware L2 on the item and user rows a batch uses, each weighted by 1 / its
    training frequency (DIN, Zhou et al. 2018): regularizes ID tables without touching
    rows outside the batch. 0 = off. The default's evidence: docs/quality.md."""
    grad_clip: float = 1.0
    """Max global gradient norm of dense parameters (0 = off)."""
    negative_keep: float = 1.0
    """Share of the training split's negatives trained on, in (0, 1]; every positive is kept.
    A negative is kept when a seeded hash of its row (user, time, item) falls below it, so
    re-runs and DDP ranks keep the same rows; validation and test are never sampled. The model
    adds ``log(negative_keep)`` to its logits (``ModelConfig.logit_shift``): what it serves and
    what evaluate scores are probabilities calibrated to all rows. 1 = every row."""
    max_epochs: int = 10
    """Upper bound on epochs; early stopping usually ends sooner."""
    patience: int = 3
    """Epochs without a validation AUC gain of min_delta before stopping (0 = never stop early)."""
    min_delta: float = 1e-4
    """Smallest validation AUC gain that counts as an improvement."""
    num_workers: int = 2
    """DataLoader worker processes per training process."""
    prefetch_factor: int = 4
    """Batches each loader worker keeps ready."""
    pin_memory: bool = False
    """Page-locked host batches (useful on CUDA only)."""
    persistent_workers: bool = True
    """Keep loader workers alive between epochs."""
    checkpoint_every_steps: int = 0
    """Also write the `last` checkpoint every N optimizer steps (0 = per epoch only); the
    estimate sizes it so a preemption loses at most `max_lost_minutes` of training."""
    max_lost_minutes: float = 10.0
    """Most minutes of training a preemption may lose: besides `checkpoint_every_steps`, rank 0
    writes `last` mid-epoch once this long has passed since the previous write (0 = off)."""
    progress_seconds: float = 20.0
    """Rank 0 logs a progress line (step/total, samples/s, loss, ETA) this often within an
    epoch (0 = only the per-epoch lines)."""
    cpu_threads: int = 1
    """Intra-op threads per process on CPU: CPU training scales with processes, one thread each
    (the evidence: docs/tuning.md)."""
    eval_batch: int = 4096
    """Samples per forward pass during validation."""
    seed: int = 0
    """Seed of initialization, shuffling and dropout."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes (ignored by the trainer)."""

    def brief(self) -> dict[str, Any]:
        """The settings a person reads first (:data:`BRIEF`): the run summary's ``plan``, the KFP
        plan artifact's metadata."""
        return {name: getattr(self, name) for name in BRIEF}

    def __post_init__(self) -> None:
        # types first: a NaN, an infinity or a string fails every comparison below silently
        self._check_types()
        self._check_counts()
        self._check_choices_and_ranges()

    def _check_types(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", "float", "bool") and (
                isinstance(value, bool) != (f.type == "bool")
                or not isinstance(value, int if f.type in ("int", "bool") else int | float)
            ):
                raise ValueError(f"plan.train.{f.name} must be {f.type}, got {value!r}")
            if f.type == "float" and not math.isfinite(value):
                raise ValueError(f"plan.train.{f.name} must be a finite number, got {value!r}")

    def _check_counts(self) -> None:
        for name in (
            "micro_batch",
            "grad_accum",
            "nproc_per_node",
            "nnodes",
            "max_epochs",
            "eval_batch",
            "prefetch_factor",
            "cpu_threads",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"plan.train.{name} must be an integer >= 1, got {value!r}")
        for name in ("patience", "num_workers", "checkpoint_every_steps", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"plan.train.{name} must be >= 0, got {getattr(self, name)!r}")
        for name, most in UPPER.items():
            if getattr(self, name) > most:
                raise ValueError(
                    f"plan.train.{name} must be <= {most:,}, got {getattr(self, name)!r}"
                )

    def _check_choices_and_ranges(self) -> None:
        for name, choices in (
            ("precision", PRECISIONS),
            ("compile", COMPILE_MODES),
            ("sparse_embeddings", SPARSE_MODES),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"plan.train.{name} must be one of {choices}, got {getattr(self, name)!r}"
                )
        if not 0 < self.lr < 1:
            raise ValueError(f"plan.train.lr must be in (0, 1), got {self.lr!r}")
        if not 0 < self.negative_keep <= 1:
            raise ValueError(
                f"plan.train.negative_keep must be in (0, 1], got {self.negative_keep!r}"
            )
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(
                f"plan.train.warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}"
            )
        for name in (
            "weight_decay",
            "grad_clip",
            "min_delta",
            "embedding_l2",
            "max_lost_minutes",
            "progress_seconds",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"plan.train.{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step across all processes."""
        return self.micro_batch * self.grad_accum * self.world_size

    @property
    def logit_shift(self) -> float:
        """What the model adds to its logits to undo the negatives' sampling: ``log(negative_keep)``
        (the odds of a click are 1 / negative_keep times higher among the rows trained on)."""
        return math.log(self.negative_keep)

    def replace(self, **changes: Any) -> TrainPlan:
        return dataclasses.replace(self, **changes)


def plan_document(
    train: TrainPlan,
    rationale: dict[str, str] | None = None,
    estimate: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON document of a plan."""
    return {
        "format": PLAN_FORMAT,
        "train": dataclasses.asdict(train),
        "rationale": rationale or {},
        "estimate": estimate or {},
    }


def write_plan(
    path: str | Path,
    train: TrainPlan,
    rationale: dict[str, str] | None = None,
    estimate: dict[str, Any] | None = None,
) -> Path:
    return atomic_write_json(path, plan_document(train, rationale, estimate))


def read_plan(path: str | Path) -> tuple[TrainPlan, dict[str, Any]]:
    """The TrainPlan of a plan.json and the whole document; errors name the file and field."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: plan file not found") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise ValueError(
            f"{path}: not a {PLAN_FORMAT} plan (format field is "
            f"{doc.get('format') if isinstance(doc, dict) else None!r})"
        )
    known = {f.name for f in dataclasses.fields(TrainPlan)}
    train = doc.get("train", {})
    unknown = sorted(set(train) - known)
    if unknown:
        raise ValueError(f"{path}: unknown field plan.train.{unknown[0]}")
    try:
        return TrainPlan(**train), doc
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


# ----------------------------------------------------------------------------- plan vs reality

DRIFT_FACTOR = 2.0
"""A measurement more than this factor above or below the plan's prediction is flagged."""


def _compare(predicted: float | None, measured: float | None) -> dict[str, Any] | None:
    if not predicted or measured is None:
        return None
    ratio = measured / predicted
    return {
        "predicted": predicted,
        "measured": measured,
        "ratio": ratio,
        "drift": not 1 / DRIFT_FACTOR <= ratio <= DRIFT_FACTOR,
    }


def plan_vs_actual(
    estimate: dict[str, Any] | None, summary: dict[str, Any]
) -> dict[str, Any] | None:
    """The plan's predictions next to a training run's measurements (None without a plan estimate).

    * ``seconds``: the plan's start-up + ``epochs_run`` x its epoch seconds (the epochs that
      really ran: early stopping is not an error of the estimate) against the training
      process's lifetime (``process_seconds``); not compared after a resume.
    * ``samples_per_s``: the plan's training rate against the epochs' measured rate.
    * ``cost_usd``: the run's hours at the plan's prices, as planned and as measured (None
      without prices or a seconds comparison).
    * ``peak_memory_bytes``: the plan's resident peak per process (with the mapped dataset
      pages) against rank 0's peak RSS (CPU), or its peak less the CUDA context (which the
      allocator does not see) against ``max_memory_reserved`` (CUDA).

    ``drift`` lists the measures more than :data:`DRIFT_FACTOR` off.
    """
    times = (estimate or {}).get("times") or {}
    if "epoch_seconds" not in times:
        return None
    epochs = summary.get("epochs_run") or 0
    out: dict[str, Any] = {"epochs_run": epochs, "epochs_planned": times.get("epochs_assumed")}
    resumed = summary.get("resumed_from")
    out["seconds"] = (
        None
        if resumed
        else _compare(
            times.get("startup_seconds", 0.0) + epochs * times["epoch_seconds"],
            summary.get("process_seconds"),
        )
    )
    if resumed:
        out["seconds_note"] = "resumed run: this process did not run every epoch"
    throughput = (estimate or {}).get("throughput") or {}
    out["samples_per_s"] = _compare(throughput.get("samples_per_s"), summary.get("samples_per_s"))
    memory = (estimate or {}).get("memory") or {}
    predicted = (memory.get("resident") or memory.get("total") or {}).get("total")
    measured = summary.get("peak_memory_bytes")
    if summary.get("device") == "cuda" and predicted:
        runtime = ((memory.get("terms") or {}).get("runtime") or {}).get("total", 0)
        predicted = (memory.get("total") or {}).get("total", predicted) - runtime
        measured = summary.get("peak_memory_reserved_bytes", measured)
    out["peak_memory_bytes"] = _compare(predicted, measured)
    out["drift"] = [
        k for k in ("seconds", "samples_per_s", "peak_memory_bytes") if (out[k] or {}).get("drift")
    ]
    # dollars: the same hours at the plan's prices (its drift is the seconds' drift)
    rate = ((estimate or {}).get("cost") or {}).get("usd_per_hour")
    out["cost_usd"] = (
        None
        if not rate or not out["seconds"]
        else _compare(
            rate * out["seconds"]["predicted"] / 3600, rate * out["seconds"]["measured"] / 3600
        )
    )
    return out


def drift_lines(pva: dict[str, Any] | None) -> list[str]:
    """Readable lines of :func:`plan_vs_actual`; the first says 'DRIFT' when a measure is flagged."""
    if not pva:
        return []

    def show(key: str, fmt, label: str | None = None) -> str | None:
        c = pva.get(key)
        return (
            None
            if not c
            else f"{label or key.replace('_', ' ')} {fmt(c['measured'])} measured vs "
            f"{fmt(c['predicted'])} planned (x{c['ratio']:.2f})"
        )

    parts = [
        show("seconds", lambda v: f"{v:,.0f}"),
        show("samples_per_s", lambda v: f"{v:,.0f}"),
        show("peak_memory_bytes", lambda v: f"{v / 2**30:.2f} GiB"),
        show("cost_usd", lambda v: f"${v:,.4f}" if v < 1 else f"${v:,.2f}", "cost"),
    ]
    lines = [f"plan vs actual ({pva['epochs_run']} epoch(s)): " + "; ".join(p for p in parts if p)]
    if pva["drift"]:
        lines.insert(
            0,
            f"DRIFT: {', '.join(pva['drift'])} more than {DRIFT_FACTOR:g}x off the plan: "
            "recalibrate the hardware profile (python -m components.estimate --probe)",
        )
    return lines
