"""Reading the small JSON records stages leave in a run folder (done-records, claims, final
failures): a record that is missing, unreadable or not an object reads as empty."""

from __future__ import annotations

import json
from pathlib import Path


def read_record(path: str | Path) -> dict:
    """The JSON object at ``path``; ``{}`` when absent, unreadable or not an object."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def claimed_at(folder: str | Path) -> float:
    """When the run that owns a run folder claimed it (its ``owner.json``); 0 when unknown. Records
    in the folder older than this were left by an earlier run of the same id."""
    value = read_record(Path(folder) / "owner.json").get("claimed_at")
    return float(value) if isinstance(value, int | float) else 0.0
