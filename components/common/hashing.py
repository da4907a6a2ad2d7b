"""Stable id hashing: the same id lands in the same bucket on every machine, every day.

An id's canonical form is its text: integer ids hash as their decimal string,
so ``42`` read from Parquet and ``"42"`` read from CSV are the same id. The
64-bit key is SipHash-2-4 of the UTF-8 text under a fixed 16-byte key, then
the splitmix64 finalizer: exactly what pandas' ``hash_array`` computes for
object arrays, pinned by a pure-Python reference in the tests so that a
change in pandas cannot silently re-bucket every id. Buckets are ``1 + key % (buckets - 1)``:
bucket 0 is reserved for padding and missing values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.util import hash_array

HASH_KEY = "dailyrec-ids-v1!"  # 16 bytes; changing it re-buckets every id (a new schema version)
PAD = 0


def canonical_id_strings(values: np.ndarray) -> np.ndarray:
    """Object array of the canonical text of each (non-null) id value.

    Integral floats (an integer column that went through NaN) become integers
    first, so ``42.0`` is the id ``"42"``; other floats keep Python's repr.
    """
    if values.dtype.kind in "iu":
        return values.astype(str).astype(object)
    if values.dtype.kind == "f":
        integral = np.isfinite(values) & (np.floor(values) == values)
        out = values.astype(str).astype(object)
        out[integral] = values[integral].astype(np.int64).astype(str)
        return out
    if values.dtype.kind == "b":
        return values.astype(np.int64).astype(str).astype(object)
    return np.asarray([_canonical_text(v) for v in values], dtype=object)


def _canonical_text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(value)


def hash_ids(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """64-bit stable keys (as int64) and a null mask for a column of ids.

    Factorizes first, so the text conversion and hashing run once per distinct
    id, not once per row. Empty strings count as null.
    """
    codes, uniques = pd.factorize(pd.Series(values), use_na_sentinel=True)
    uniques = np.asarray(uniques)
    if uniques.dtype.kind in "OUT":
        uniques = uniques.astype(object)
    text = canonical_id_strings(uniques) if len(uniques) else np.empty(0, dtype=object)
    keys = hash_array(text, hash_key=HASH_KEY, categorize=False).view(np.int64)
    null = codes < 0
    if len(text):
        empty = np.fromiter((t == "" for t in text), dtype=bool, count=len(text))
        null |= empty[np.maximum(codes, 0)] & (codes >= 0)
    out = np.where(null, 0, keys[np.maximum(codes, 0)] if len(keys) else 0).astype(np.int64)
    return out, null


def bucketize(keys: np.ndarray, buckets: int, null: np.ndarray | None = None) -> np.ndarray:
    """Bucket index in ``[1, buckets)`` for each key (``PAD`` where null), as int32."""
    if buckets < 2:
        raise ValueError(f"buckets must be >= 2 (one is reserved for padding), got {buckets}")
    out = (keys.view(np.uint64) % np.uint64(buckets - 1)).astype(np.int64) + 1
    if null is not None:
        out[null] = PAD
    return out.astype(np.int32)
