"""A tiny synthetic dataset (the session fixture ``tiny_dataset`` lives in tests/conftest.py)."""

from __future__ import annotations

from components.common.schema import datagen_summary
from components.datagen import DatagenConfig, generate
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import preprocess

TINY_BUCKETS = {"item_buckets": 2048, "category_buckets": 128, "user_buckets": 1024}


def make_dataset(root, seed: int = 5, name: str = "data", **bucket_overrides):
    """The tiny world's logs (``root/raw``, generated once) preprocessed into ``root/name``."""
    raw = root / "raw"
    if not datagen_summary(raw).is_file():
        generate(
            DatagenConfig(
                out=raw, days=5, users=400, items=600, categories=30, events_per_day=2500, seed=seed
            )
        )
    data = root / name
    preprocess(
        PreprocessConfig(
            raw=str(raw),
            out=str(data),
            days=4,
            history_days=1,
            seq_len=8,
            rows_per_partition=5000,
            **(TINY_BUCKETS | bucket_overrides),
        )
    )
    return data
