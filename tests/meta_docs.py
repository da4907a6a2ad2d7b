"""A dataset meta.json document as preprocess writes one, for tests that need the document and
not the arrays: every field the readers check, the rest as given."""

from __future__ import annotations

from typing import Any

from components.common.dataset import DENSE_FEATURES, SCHEMA_VERSION, SPLITS, array_specs


def meta_document(rows: dict[str, int] | None = None, **fields: Any) -> dict[str, Any]:
    """A minimal valid document with ``rows`` per split (default 10 / 3 / 4), 10% clicks."""
    rows = rows or {"train": 10, "val": 3, "test": 4}
    seq_len, neg_len = fields.pop("seq_len", 5), fields.pop("neg_len", 2)
    return {
        "schema_version": SCHEMA_VERSION,
        "seq_len": seq_len,
        "neg_len": neg_len,
        "arrays": {
            k: {"dtype": d, "row_shape": list(s)}
            for k, (d, s) in array_specs(seq_len, neg_len).items()
        },
        "splits": {
            s: {"rows": n, "positives": n // 10, "positive_rate": (n // 10) / n if n else 0.0}
            for s, n in rows.items()
            if s in SPLITS
        },
        "buckets": {"item": 64, "category": 16, "user": 32, "gap": 16},
        "context_features": {"hour": 24, "dow": 7},
        "dense_features": {"names": list(DENSE_FEATURES)},
        **fields,
    }
