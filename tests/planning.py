"""What the estimate stage plans from, without a real dataset: a dataset folder the planner reads
(its ``meta.json`` and empty array files) and a hardware profile with fields overridden."""

from __future__ import annotations

import json
from pathlib import Path

from components.common.dataset import DENSE_FEATURES, SCHEMA_VERSION, SPLITS, array_specs
from components.estimate import load_profile

NEG_LEN = 10


def fake_dataset(
    root: Path, rows: int = 100_000, seq_len: int = 20, item: int = 1 << 18, user: int = 1 << 18
) -> Path:
    """A folder DatasetMeta.read accepts (meta.json + empty array files): enough for the planner."""
    root.mkdir(parents=True, exist_ok=True)
    specs = array_specs(seq_len, NEG_LEN)
    meta = {
        "schema_version": SCHEMA_VERSION,
        "seq_len": seq_len,
        "neg_len": NEG_LEN,
        "dense_features": {"names": list(DENSE_FEATURES)},
        "arrays": {k: {"dtype": d, "row_shape": list(s)} for k, (d, s) in specs.items()},
        "splits": {
            s: {"rows": rows if s == "train" else rows // 10, "positive_rate": 0.08} for s in SPLITS
        },
        "buckets": {"item": item, "category": 1 << 12, "user": user, "gap": 16},
        "context_features": {"hour": 24, "dow": 7},
        "fingerprint": "test",
    }
    (root / "meta.json").write_text(json.dumps(meta))
    for split in SPLITS:
        (root / split).mkdir(exist_ok=True)
        for name in specs:
            (root / split / f"{name}.npy").write_bytes(b"")
    return root


def profile_file(tmp_path: Path, name: str = "custom", **overrides) -> str:
    """The a100-80gb profile with ``overrides``, saved as ``<name>.json``: its path."""
    doc = json.loads(Path(load_profile("a100-80gb").source).read_text())
    doc |= {"name": name, **overrides}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return str(path)
