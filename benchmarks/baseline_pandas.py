"""The straightforward baseline: pandas, everything in memory, histories by groupby.

What a first version of the preprocess stage would look like without Dask:
read every file of the window into one DataFrame, validate and hash it with
the same row-level code as dailyrec (so the comparison is about the
architecture, not the parsing), sort, drop duplicates, and build each user's
histories in a ``groupby``. It writes the same arrays, so a test can check
that both give the same rows.

Usage: python -m benchmarks.baseline_pandas --raw DIR --out DIR [--days N ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from components.common import schema
from components.common.hashing import bucketize
from components.preprocess import raw as rawio
from components.preprocess.clean import DayWindow, clean_table
from components.preprocess.config import GAP_EDGES_SECONDS, PreprocessConfig
from components.preprocess.counts import CounterState, dense_features, user_features
from components.preprocess.sequences import context_features
from components.preprocess.stage import SPLITS, Window, array_specs


def user_histories(
    group: pd.DataFrame, seq_len: int, label: int = 1, prefix: str = "hist"
) -> pd.DataFrame:
    """One user's rows (sorted by time) -> their history columns (clicks: label 1; skips: label 0)."""
    ts = group["ts"].to_numpy()
    clicks = group["label"].to_numpy() == label
    click_ts, click_item, click_cat = (
        ts[clicks],
        group["item"].to_numpy()[clicks],
        group["cat"].to_numpy()[clicks],
    )
    end = np.searchsorted(click_ts, ts, side="left")
    idx = end[:, None] + np.arange(-seq_len, 0)
    valid = idx >= 0
    safe = np.where(valid, idx, 0)
    if len(click_ts) == 0:
        valid[:] = False
        safe[:] = 0
        click_item = click_cat = click_ts = np.zeros(1, np.int64)
    gap = np.searchsorted(GAP_EDGES_SECONDS, ts[:, None] - click_ts[safe], side="right") + 1
    return pd.DataFrame(
        {
            f"{prefix}_item": list(np.where(valid, click_item[safe], 0)),
            f"{prefix}_cat": list(np.where(valid, click_cat[safe], 0)),
            f"{prefix}_gap": list(np.where(valid, gap, 0)),
            f"{prefix}_len": np.minimum(end, seq_len),
        },
        index=group.index,
    )


def run_baseline(config: PreprocessConfig) -> dict[str, int]:
    fs, day_paths = rawio.list_days(config.raw)
    window = Window(config.end_date or max(day_paths), config)
    files = rawio.list_files(
        fs, {d: p for d, p in day_paths.items() if window.first_read <= d <= window.end}
    )
    frames = []
    for piece in rawio.plan_pieces(fs, files):
        day = DayWindow.for_day(schema.epoch_day(piece.file.day), config.max_skew_hours)
        clean, _, _ = clean_table(
            rawio.read_piece(fs, piece), piece.file.index, piece.row_offset, day
        )
        frames.append(clean)
    df = pd.concat(frames, ignore_index=True)
    df = df.sort_values(["user_key", "ts", "item_key", "cat_key", "label", "day"])
    df = df.drop_duplicates(["user_key", "ts", "item_key", "cat_key", "label"])
    df["item"] = bucketize(df["item_key"].to_numpy(), config.item_buckets)
    df["cat"] = bucketize(
        df["cat_key"].to_numpy(), config.category_buckets, df["cat_key"].to_numpy() == 0
    )
    by_user = df.groupby("user_key", sort=False, group_keys=False)[["ts", "label", "item", "cat"]]
    df = df.join(by_user.apply(user_histories, seq_len=config.seq_len))
    df = df.join(by_user.apply(user_histories, seq_len=config.neg_len, label=0, prefix="neg"))
    # The count features, all rows at once (the same definitions as the stage's counts.py).
    cols = [df[c].to_numpy() for c in ("user_key", "item_key", "cat_key", "ts", "label")]
    global_columns, prior = CounterState().features(*cols[1:])
    dense = dense_features(global_columns, user_features(*cols, prior))
    starts = window.day_numbers()
    rows = {}
    for i, split in enumerate(SPLITS):
        end = starts[SPLITS[i + 1]] if i + 1 < len(SPLITS) else schema.epoch_day(window.end) + 1
        in_split = ((df["day"] >= starts[split]) & (df["day"] < end)).to_numpy()
        part = df[in_split]
        arrays = {
            **{
                f"{p}_{n}": np.stack(part[f"{p}_{n}"].to_numpy()) if len(part) else None
                for p in ("hist", "neg")
                for n in ("item", "cat", "gap")
            },
            "hist_len": part["hist_len"].to_numpy(),
            "neg_len": part["neg_len"].to_numpy(),
            "dense": dense[in_split],
            "target_item": part["item"].to_numpy(),
            "target_cat": part["cat"].to_numpy(),
            "user": bucketize(part["user_key"].to_numpy(), config.user_buckets),
            "user_key": part["user_key"].to_numpy(),
            "context": context_features(part["ts"].to_numpy()),
            "ts": part["ts"].to_numpy(),
            "label": part["label"].to_numpy(),
        }
        folder = Path(config.out) / split
        folder.mkdir(parents=True, exist_ok=True)
        for name, (dtype, tail) in array_specs(config.seq_len, config.neg_len).items():
            values = arrays[name] if arrays[name] is not None else np.zeros((0, *tail))
            np.save(folder / f"{name}.npy", values.astype(dtype))
        rows[split] = len(part)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--end-date", type=dt.date.fromisoformat, default=None)
    p.add_argument("--days", type=int, default=14)
    p.add_argument("--history-days", type=int, default=7)
    p.add_argument("--seq-len", type=int, default=20)
    args = p.parse_args(argv)
    print(run_baseline(PreprocessConfig(**vars(args))))


if __name__ == "__main__":
    main()
