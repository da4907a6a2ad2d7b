"""Hardware profiles: the devices a plan can be made for, as JSON data files.

The named profiles live next to this module in ``hardware/<name>.json``
(``a100-40gb``, ``a100-80gb``, ``h100-80gb``, ``h200-141gb``, ``cpu-local``).
``--hardware`` also accepts the path of a user's own JSON file with the same
fields (:data:`FIELDS`); every error names the file and the field.

``cpu-local`` is detected at run time: "GPUs per node" becomes this machine's
usable cores (one training process per core, one intra-op thread each; why:
docs/tuning.md, "One intra-op thread per CPU process"), and each process's
"device memory" is its share of the RAM (total RAM / cores).

The time model's constants (:data:`TIME_FIELDS`: efficiency, per-step floor,
start-up, validation and checkpoint costs) are fields too, and every one of
them must name where its value comes from in the profile's ``sources`` object
(a measurement on a named machine, or a published figure): a plan's time is
only as good as those numbers, so a reader must be able to check them.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).resolve().parent / "hardware"
KINDS = ("gpu", "cpu")

FIELDS: dict[str, str] = {
    "name": "profile name",
    "kind": "gpu | cpu",
    "memory_bytes": "memory of one device (bytes)",
    "bf16_flops": "dense bf16 peak FLOP/s of one device (fp32 FLOP/s where bf16 is false)",
    "bf16": "whether the device trains in bf16 (autocast)",
    "hbm_bandwidth_bytes_per_s": "device memory bandwidth",
    "gpus_per_node": "devices (training processes) per node",
    "max_nodes": "most nodes the pool can give one job",
    "interconnect": "description of the links",
    "intra_node_bandwidth_bytes_per_s": "all-reduce bus bandwidth inside a node",
    "inter_node_bandwidth_bytes_per_s": "all-reduce bus bandwidth between nodes (per node)",
    "cpu_cores_per_gpu": "host CPU cores per device (for data-loader workers)",
    "mfu": "share of bf16_flops a training step achieves (model FLOPs utilization)",
    "memory_efficiency": "share of hbm_bandwidth_bytes_per_s embedding gathers and optimizer updates achieve",
    "step_latency_seconds": "floor of one micro-step (kernel launches, Python, loader hand-off)",
    "parallel_efficiency": "per-process throughput with several processes / alone (beyond the all-reduce term)",
    "allreduce_latency_seconds": "fixed cost of one optimizer step's gradient synchronization (world > 1)",
    "eval_speedup": "validation samples/s / training samples/s of one process (forward only, bigger batches)",
    "startup_seconds": "launch to first step: process start, imports, dataset open, model build, DDP init",
    "startup_seconds_per_process": "start-up added by each further process on a node (they share its cores)",
    "pod_startup_seconds": "scheduling and starting the training pods (0 off a cluster)",
    "image_pull_seconds": "pulling the training image onto a fresh node (0 off a cluster)",
    "checkpoint_write_bytes_per_s": "write bandwidth of the checkpoint storage",
    "process_baseline_bytes": "memory of a training process before its tensors (interpreter and "
    "libraries on CPU; CUDA context on a GPU)",
    "sources": "where each time-model constant comes from: {field: measurement or publication}",
}
TIME_FIELDS = (
    "mfu",
    "memory_efficiency",
    "step_latency_seconds",
    "parallel_efficiency",
    "allreduce_latency_seconds",
    "eval_speedup",
    "startup_seconds",
    "startup_seconds_per_process",
    "pod_startup_seconds",
    "image_pull_seconds",
    "checkpoint_write_bytes_per_s",
    "process_baseline_bytes",
)
"""The calibrated constants: each needs an entry in ``sources``."""
PRICE_FIELDS: dict[str, str] = {
    "price_per_device_hour": "what one device (GPU; a training process's core on CPU) costs per "
    "hour, in US dollars",
    "price_per_node_hour": "what a node costs per hour beyond its devices (a CPU pool's whole "
    "machine), in US dollars",
    "price_source": "where the prices come from (the offer and region)",
    "price_date": "when the prices were read (YYYY-MM)",
}
"""Optional: what a run costs (the plan states it, the run summary measures it, a deadline's
plan is the cheapest that meets it). User-set: the shipped figures are public on-demand list
prices of the date given; a reserved, spot or on-premises price is the user's to set."""
FRACTIONS = ("mfu", "memory_efficiency", "parallel_efficiency")
NON_NEGATIVE = (
    "step_latency_seconds",
    "allreduce_latency_seconds",
    "startup_seconds",
    "startup_seconds_per_process",
    "pod_startup_seconds",
    "image_pull_seconds",
    "process_baseline_bytes",
)
NUMBERS = (
    "memory_bytes",
    "bf16_flops",
    "hbm_bandwidth_bytes_per_s",
    "intra_node_bandwidth_bytes_per_s",
    "inter_node_bandwidth_bytes_per_s",
    "eval_speedup",
    "checkpoint_write_bytes_per_s",
)
INTEGERS = ("gpus_per_node", "max_nodes", "cpu_cores_per_gpu")


class HardwareError(ValueError):
    """A profile that cannot be found or read; the message names the file and field."""


@dataclass(frozen=True)
class HardwareProfile:
    """One device type and the pool it comes in (validated; see :data:`FIELDS`)."""

    name: str
    kind: str
    memory_bytes: int
    bf16_flops: float
    bf16: bool
    hbm_bandwidth_bytes_per_s: float
    gpus_per_node: int
    max_nodes: int
    interconnect: str
    intra_node_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    cpu_cores_per_gpu: int
    mfu: float = 0.05
    memory_efficiency: float = 0.5
    step_latency_seconds: float = 0.0
    parallel_efficiency: float = 1.0
    allreduce_latency_seconds: float = 0.0
    eval_speedup: float = 3.0
    startup_seconds: float = 0.0
    startup_seconds_per_process: float = 0.0
    pod_startup_seconds: float = 0.0
    image_pull_seconds: float = 0.0
    checkpoint_write_bytes_per_s: float = 1e9
    process_baseline_bytes: int = 0
    sources: dict[str, str] = dataclasses.field(default_factory=dict)
    """Where each of :data:`TIME_FIELDS` comes from."""
    price_per_device_hour: float = 0.0
    price_per_node_hour: float = 0.0
    price_source: str = ""
    price_date: str = ""
    description: str = ""
    source: str = ""
    """The file it was read from."""
    detected: bool = False
    """True when fields were detected on this machine (cpu-local)."""

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    @property
    def max_world(self) -> int:
        return self.gpus_per_node * self.max_nodes

    def usd_per_hour(self, nproc: int, nnodes: int) -> float:
        """What ``nproc`` devices on each of ``nnodes`` nodes cost per hour (:data:`PRICE_FIELDS`)."""
        return nproc * nnodes * self.price_per_device_hour + nnodes * self.price_per_node_hour

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def total_ram() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def _detect(doc: dict[str, Any]) -> dict[str, Any]:
    """Fill the ``"detect"`` fields of a CPU profile from this machine."""
    doc = dict(doc)
    cores = usable_cores()
    if doc.get("gpus_per_node") == "detect":
        doc["gpus_per_node"] = cores
    procs = doc["gpus_per_node"] if isinstance(doc["gpus_per_node"], int) else cores
    if doc.get("memory_bytes") == "detect":
        doc["memory_bytes"] = total_ram() // max(1, procs)  # each process's share of the RAM
    return doc


def validate_profile(doc: Any, source: str) -> HardwareProfile:
    """A HardwareProfile from a parsed JSON document; errors name ``source`` and the field."""
    if not isinstance(doc, dict):
        raise HardwareError(f"{source}: expected a JSON object, found {type(doc).__name__}")
    detected = any(v == "detect" for v in doc.values())
    if detected:
        doc = _detect(doc)
    missing = [f for f in FIELDS if f not in doc]
    if missing:
        raise HardwareError(f"{source}: missing field {missing[0]!r} ({FIELDS[missing[0]]})")
    unknown = sorted(set(doc) - set(FIELDS) - set(PRICE_FIELDS) - {"description"})
    if unknown:
        raise HardwareError(f"{source}: unknown field {unknown[0]!r}; known: {', '.join(FIELDS)}")
    if doc["kind"] not in KINDS:
        raise HardwareError(f"{source}: field 'kind' must be one of {KINDS}, got {doc['kind']!r}")

    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    for name in NUMBERS:
        value = doc[name]
        if not number(value) or not value > 0:
            raise HardwareError(f"{source}: field {name!r} must be a number > 0, got {value!r}")
    for name in FRACTIONS:
        if not number(doc[name]) or not 0 < doc[name] <= 1:
            raise HardwareError(
                f"{source}: field {name!r} must be a number in (0, 1], got {doc[name]!r}"
            )
    for name in NON_NEGATIVE:
        if not number(doc[name]) or doc[name] < 0:
            raise HardwareError(
                f"{source}: field {name!r} must be a number >= 0, got {doc[name]!r}"
            )
    sources = doc["sources"]
    if not isinstance(sources, dict):
        raise HardwareError(f"{source}: field 'sources' must be an object {{field: source}}")
    unsourced = [
        f for f in TIME_FIELDS if not isinstance(sources.get(f), str) or not sources[f].strip()
    ]
    if unsourced:
        raise HardwareError(
            f"{source}: field 'sources' does not say where {unsourced[0]!r} comes from "
            f"(a measurement or a publication)"
        )
    prices = {name: doc.get(name, 0.0) for name in ("price_per_device_hour", "price_per_node_hour")}
    for name, value in prices.items():
        if not number(value) or value < 0:
            raise HardwareError(f"{source}: field {name!r} must be a number >= 0, got {value!r}")
    if any(prices.values()):
        for name in ("price_source", "price_date"):
            if not isinstance(doc.get(name), str) or not doc[name].strip():
                raise HardwareError(
                    f"{source}: field {name!r} must say {PRICE_FIELDS[name]} when a price is set"
                )
    for name in INTEGERS:
        value = doc[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise HardwareError(f"{source}: field {name!r} must be an integer >= 1, got {value!r}")
    if not isinstance(doc["bf16"], bool):
        raise HardwareError(f"{source}: field 'bf16' must be true or false, got {doc['bf16']!r}")
    for name in ("name", "interconnect"):
        if not isinstance(doc[name], str) or not doc[name]:
            raise HardwareError(
                f"{source}: field {name!r} must be a non-empty string, got {doc[name]!r}"
            )
    return HardwareProfile(
        name=doc["name"],
        kind=doc["kind"],
        memory_bytes=int(doc["memory_bytes"]),
        bf16_flops=float(doc["bf16_flops"]),
        bf16=doc["bf16"],
        hbm_bandwidth_bytes_per_s=float(doc["hbm_bandwidth_bytes_per_s"]),
        gpus_per_node=doc["gpus_per_node"],
        max_nodes=doc["max_nodes"],
        interconnect=doc["interconnect"],
        intra_node_bandwidth_bytes_per_s=float(doc["intra_node_bandwidth_bytes_per_s"]),
        inter_node_bandwidth_bytes_per_s=float(doc["inter_node_bandwidth_bytes_per_s"]),
        cpu_cores_per_gpu=doc["cpu_cores_per_gpu"],
        **{name: float(doc[name]) for name in TIME_FIELDS if name != "process_baseline_bytes"},
        process_baseline_bytes=int(doc["process_baseline_bytes"]),
        sources=dict(sources),
        **{name: float(value) for name, value in prices.items()},
        price_source=str(doc.get("price_source", "")),
        price_date=str(doc.get("price_date", "")),
        description=str(doc.get("description", "")),
        source=source,
        detected=detected,
    )


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A named profile (see :func:`available_profiles`) or a user's JSON file."""
    text = str(name_or_path)
    path = PROFILE_DIR / f"{text}.json"
    if not path.is_file():
        path = Path(text)
        if not path.is_file():
            raise HardwareError(
                f"unknown hardware profile {text!r}: not a file and not one of "
                f"{', '.join(available_profiles())}"
            )
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HardwareError(f"{path}: unreadable hardware profile ({exc})") from None
    return validate_profile(doc, str(path))
