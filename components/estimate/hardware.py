"""Hardware profiles: the devices a plan can be made for, as JSON data files.

The named profiles live next to this module in ``hardware/<name>.json``
(``a100-40gb``, ``a100-80gb``, ``h100-80gb``, ``h200-141gb``, ``cpu-local``).
``--hardware`` also accepts the path of a user's own JSON file with the same
fields (:data:`FIELDS`); every error names the file and the field.

``cpu-local`` is detected at run time: "GPUs per node" becomes this machine's
usable cores (one training process per core, one intra-op thread each: the
measured best on the 2-vCPU development VM), and each process's "device memory"
is its share of the RAM (total RAM / cores).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).resolve().parent / "hardware"
KINDS = ("gpu", "cpu")
CPU_FLOPS_PER_CORE = 4e9
"""Assumed effective fp32 FLOP/s of one core running this model's small kernels (not a peak:
the documented ~7 k samples/s of ``local`` on 2 cores is ~4-5 GFLOP/s per core). ``--probe``
replaces it with a measurement."""

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
}
NUMBERS = ("memory_bytes", "bf16_flops", "hbm_bandwidth_bytes_per_s",
           "intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s")
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
    if doc.get("bf16_flops") == "detect":
        doc["bf16_flops"] = CPU_FLOPS_PER_CORE
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
    unknown = sorted(set(doc) - set(FIELDS) - {"description"})
    if unknown:
        raise HardwareError(f"{source}: unknown field {unknown[0]!r}; known: {', '.join(FIELDS)}")
    if doc["kind"] not in KINDS:
        raise HardwareError(f"{source}: field 'kind' must be one of {KINDS}, got {doc['kind']!r}")
    for name in NUMBERS:
        value = doc[name]
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            raise HardwareError(f"{source}: field {name!r} must be a number > 0, got {value!r}")
    for name in INTEGERS:
        value = doc[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise HardwareError(f"{source}: field {name!r} must be an integer >= 1, got {value!r}")
    if not isinstance(doc["bf16"], bool):
        raise HardwareError(f"{source}: field 'bf16' must be true or false, got {doc['bf16']!r}")
    for name in ("name", "interconnect"):
        if not isinstance(doc[name], str) or not doc[name]:
            raise HardwareError(f"{source}: field {name!r} must be a non-empty string, got {doc[name]!r}")
    return HardwareProfile(
        name=doc["name"], kind=doc["kind"], memory_bytes=int(doc["memory_bytes"]),
        bf16_flops=float(doc["bf16_flops"]), bf16=doc["bf16"],
        hbm_bandwidth_bytes_per_s=float(doc["hbm_bandwidth_bytes_per_s"]),
        gpus_per_node=doc["gpus_per_node"], max_nodes=doc["max_nodes"],
        interconnect=doc["interconnect"],
        intra_node_bandwidth_bytes_per_s=float(doc["intra_node_bandwidth_bytes_per_s"]),
        inter_node_bandwidth_bytes_per_s=float(doc["inter_node_bandwidth_bytes_per_s"]),
        cpu_cores_per_gpu=doc["cpu_cores_per_gpu"], description=str(doc.get("description", "")),
        source=source, detected=detected)


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A named profile (see :func:`available_profiles`) or a user's JSON file."""
    text = str(name_or_path)
    path = PROFILE_DIR / f"{text}.json"
    if not path.is_file():
        path = Path(text)
        if not path.is_file():
            raise HardwareError(f"unknown hardware profile {text!r}: not a file and not one of "
                                f"{', '.join(available_profiles())}")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HardwareError(f"{path}: unreadable hardware profile ({exc})") from None
    return validate_profile(doc, str(path))
