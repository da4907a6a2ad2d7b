"""The Dataset contract between preprocess (writer) and train/evaluate (readers).

Kept here, free of Dask, so a training process does not import the
preprocessing stack to learn the array layout.
"""

from __future__ import annotations

SCHEMA_VERSION = 1
SPLITS = ("train", "val", "test")


def array_specs(seq_len: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Name -> (dtype, per-row shape) of every per-split array (the Dataset contract)."""
    return {
        "hist_item": ("int32", (seq_len,)),
        "hist_cat": ("int32", (seq_len,)),
        "hist_gap": ("uint8", (seq_len,)),
        "hist_len": ("int16", ()),
        "target_item": ("int32", ()),
        "target_cat": ("int32", ()),
        "user": ("int32", ()),
        "user_key": ("int64", ()),
        "context": ("uint8", (2,)),
        "ts": ("int64", ()),
        "label": ("uint8", ()),
    }
