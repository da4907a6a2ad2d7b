"""The preprocess stage end to end on tiny raw folders (real Dask, real files)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.common import schema
from components.common.dataset_meta import DatasetMeta
from components.common.hashing import bucketize, hash_ids
from components.preprocess import stage
from components.preprocess.config import GAP_EDGES_SECONDS, PreprocessConfig
from components.preprocess.errors import InputError
from components.preprocess.stage import SPLITS, preprocess
from tests.conftest import START, write_day
from tests.reference import brute_force_features

pytestmark = pytest.mark.integration

SEQ_LEN = 4
NEG_LEN = 3
SMALL = {
    "days": 4,
    "history_days": 2,
    "seq_len": SEQ_LEN,
    "neg_len": NEG_LEN,
    "rows_per_partition": 250,
    "item_buckets": 1000,
    "category_buckets": 64,
    "user_buckets": 128,
}


def run(raw, out, **overrides) -> DatasetMeta:
    return preprocess(PreprocessConfig(raw=str(raw), out=str(out), **(SMALL | overrides)))


def load_split(out: Path, split: str) -> dict[str, np.ndarray]:
    return {p.stem: np.load(p) for p in sorted((out / split).glob("*.npy"))}


def all_rows(out: Path) -> dict[str, np.ndarray]:
    """Every split's arrays, concatenated and put in a canonical row order."""
    parts = [load_split(out, s) for s in SPLITS]
    merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.lexsort(
        (
            merged["label"],
            merged["target_cat"],
            merged["target_item"],
            merged["ts"],
            merged["user_key"],
        )
    )
    return {k: v[order] for k, v in merged.items()}


def reference(frames: dict[dt.date, pd.DataFrame], window_start: dt.date) -> pd.DataFrame:
    """Plain pandas + Python: de-duplicate, then each window row's last clicks and last skipped
    exposures before it, and its count features from every earlier row."""
    df = pd.concat([f.assign(day=d) for d, f in frames.items()], ignore_index=True)
    df["user_key"], _ = hash_ids(df["user_id"])
    item_key, _ = hash_ids(df["item_id"])
    cat_key, _ = hash_ids(df["category_id"])
    df["item"] = bucketize(item_key, SMALL["item_buckets"])
    df["cat"] = bucketize(cat_key, SMALL["category_buckets"])
    df["item_key"], df["cat_key"] = item_key, cat_key
    df = df.sort_values(["user_key", "timestamp", "item_key", "cat_key", "label"], kind="stable")
    df = df.drop_duplicates(["user_key", "timestamp", "item_key", "cat_key", "label"])
    df = df.reset_index(drop=True)
    dense = brute_force_features(df.rename(columns={"timestamp": "ts"}))
    rows = []
    for _, user_rows in df.groupby("user_key", sort=False):
        for row in user_rows.itertuples():
            if row.day < window_start:
                continue
            entry = {
                "user_key": row.user_key,
                "ts": row.timestamp,
                "target_item": row.item,
                "target_cat": row.cat,
                "label": row.label,
                "dense": dense[row.Index],
            }
            for prefix, label, length in (("hist", 1, SEQ_LEN), ("neg", 0, NEG_LEN)):
                events = user_rows[user_rows["label"] == label]
                before = events[events["timestamp"] < row.timestamp].tail(length)
                pad = length - len(before)
                gaps = (
                    np.searchsorted(
                        GAP_EDGES_SECONDS,
                        row.timestamp - before["timestamp"].to_numpy(),
                        side="right",
                    )
                    + 1
                )
                entry |= {
                    f"{prefix}_item": [0] * pad + before["item"].tolist(),
                    f"{prefix}_cat": [0] * pad + before["cat"].tolist(),
                    f"{prefix}_gap": [0] * pad + gaps.tolist(),
                    f"{prefix}_len": len(before),
                }
            rows.append(entry)
    out = pd.DataFrame(rows)
    return out.sort_values(["user_key", "ts", "target_item", "target_cat", "label"]).reset_index(
        drop=True
    )


def test_arrays_match_a_plain_python_reference(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=300)
    meta = run(raw, tmp_path / "ds")
    got = all_rows(tmp_path / "ds")
    want = reference(frames, window_start=START + dt.timedelta(days=2))
    assert len(got["label"]) == len(want)
    np.testing.assert_array_equal(got["user_key"], want["user_key"].to_numpy())
    np.testing.assert_array_equal(got["ts"], want["ts"].to_numpy())
    np.testing.assert_array_equal(got["target_item"], want["target_item"].to_numpy())
    for prefix in ("hist", "neg"):
        for name in (f"{prefix}_item", f"{prefix}_cat", f"{prefix}_gap"):
            np.testing.assert_array_equal(got[name], np.stack(want[name].to_numpy()), err_msg=name)
        np.testing.assert_array_equal(got[f"{prefix}_len"], want[f"{prefix}_len"].to_numpy())
    assert got["hist_len"].max() == SEQ_LEN and got["neg_len"].max() == NEG_LEN  # they fill up
    np.testing.assert_allclose(
        got["dense"], np.stack(want["dense"].to_numpy()), rtol=1e-5, atol=1e-5
    )
    # several partitions were used, so the user shuffle really ran
    assert meta.rows["read"] == 1800


def test_meta_accounting_splits_and_array_contract(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=300)
    meta = run(raw, tmp_path / "ds")
    rows = meta.rows
    assert rows["read"] == sum(len(f) for f in frames.values())
    assert (
        rows["read"]
        == sum(rows["kept"].values()) + rows["quarantined_total"] + rows["duplicates_dropped"]
    )
    days = {
        s: [START + dt.timedelta(days=i) for i in r]
        for s, r in {"train": (2, 3), "val": (4,), "test": (5,)}.items()
    }
    for split in SPLITS:
        arrays = load_split(tmp_path / "ds", split)
        n = meta.splits[split].rows
        for name, spec in meta.arrays.items():
            assert arrays[name].dtype == np.dtype(spec.dtype), name
            assert arrays[name].shape == (n, *spec.row_shape), name
        row_days = {
            dt.date(1970, 1, 1) + dt.timedelta(days=int(d))
            for d in np.unique(arrays["ts"] // 86_400)
        }
        assert row_days == set(days[split])
        assert meta.splits[split].positives == int(arrays["label"].sum())
    assert rows["kept"]["history_only"] == sum(
        len(frames[START + dt.timedelta(days=i)]) for i in (0, 1)
    )
    events = pd.read_parquet(tmp_path / "ds" / "events")
    assert len(events) == sum(meta.splits[s].rows for s in SPLITS)
    assert set(events["split"]) == set(SPLITS)


def test_rerun_is_a_noop_and_forced_rerun_is_byte_identical(raw_days, tmp_path):
    raw, _ = raw_days(days=6, rows=300)
    out = tmp_path / "ds"
    first = run(raw, out)
    before = {p.name: p.read_bytes() for p in (out / "train").glob("*.npy")}
    meta_mtime = (out / "meta.json").stat().st_mtime_ns
    assert run(raw, out).fingerprint == first.fingerprint
    assert (out / "meta.json").stat().st_mtime_ns == meta_mtime  # nothing rewritten
    forced = run(raw, out, force=True)
    assert forced.fingerprint == first.fingerprint
    assert {p.name: p.read_bytes() for p in (out / "train").glob("*.npy")} == before


def test_changed_input_or_config_changes_the_fingerprint(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=300)
    first = run(raw, tmp_path / "a")
    assert run(raw, tmp_path / "b", seq_len=5).fingerprint != first.fingerprint
    last = max(frames)
    write_day(raw, last, frames[last].iloc[:-1])
    assert run(raw, tmp_path / "c").fingerprint != first.fingerprint


def test_csv_with_string_ids_and_iso_times_equals_parquet_with_integers(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=300)
    csv_root = tmp_path / "csv"
    for day, frame in frames.items():
        text = frame.assign(
            timestamp=pd.to_datetime(frame["timestamp"], unit="s", utc=True).dt.strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        )
        write_day(csv_root, day, text, fmt="csv")
    run(raw, tmp_path / "from-parquet")
    run(csv_root, tmp_path / "from-csv")
    a, b = all_rows(tmp_path / "from-parquet"), all_rows(tmp_path / "from-csv")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_mixed_csv_and_parquet_days(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=300)
    day = START + dt.timedelta(days=3)
    (raw / schema.day_folder_name(day) / "part-00000.parquet").unlink()
    half = len(frames[day]) // 2
    write_day(raw, day, frames[day].iloc[:half], fmt="csv", name="a")
    write_day(raw, day, frames[day].iloc[half:], fmt="parquet", name="b")
    meta = run(raw, tmp_path / "ds")
    assert meta.rows["read"] == 1800
    assert "dt=2026-03-04/a.csv" in meta.inputs["files"]


def test_duplicates_and_bad_rows_are_counted_and_quarantined(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=300)
    day = START + dt.timedelta(days=4)
    frame = frames[day].astype({"user_id": object, "label": object})
    frame.loc[7, "user_id"] = None
    frame.loc[9, "label"] = 3
    frame = pd.concat([frame, frame.iloc[20:25]], ignore_index=True)  # 5 exact duplicates
    write_day(raw, day, frame.astype({"label": str, "user_id": str}).replace({"None": None}))
    meta = run(raw, tmp_path / "ds")
    rows = meta.rows
    assert rows["quarantined"] == {"bad_label": 1, "null_user_id": 1}
    assert rows["duplicates_dropped"] >= 5
    assert rows["read"] == 1805
    assert (
        rows["read"]
        == sum(rows["kept"].values()) + rows["quarantined_total"] + rows["duplicates_dropped"]
    )
    quarantine = pd.read_parquet(tmp_path / "ds" / "quarantine")
    assert sorted(quarantine[["file", "row", "reason"]].values.tolist()) == [
        ["dt=2026-03-05/part-00000.parquet", 7, "null_user_id"],
        ["dt=2026-03-05/part-00000.parquet", 9, "bad_label"],
    ]


def test_quarantined_rows_in_later_row_groups_keep_their_file_row_numbers(raw_days, tmp_path):
    """Row numbers count from the file's first row, not from each row group's (the rows Dask reads
    per piece restart at 0 in every group)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw, frames = raw_days(days=6, rows=300)
    day = START + dt.timedelta(days=4)
    frame = frames[day].astype({"user_id": "Int64", "label": "Int64"})
    frame.loc[30, "label"] = 7  # row group 0
    frame.loc[120, "user_id"] = pd.NA  # row group 1
    frame.loc[250, "label"] = 2  # row group 2
    frame.loc[299, "user_id"] = pd.NA  # the very last row
    path = raw / schema.day_folder_name(day) / "part-00000.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=100)
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    meta = run(raw, tmp_path / "ds")
    assert meta.rows["quarantined"] == {"bad_label": 2, "null_user_id": 2}
    quarantine = pd.read_parquet(tmp_path / "ds" / "quarantine")
    assert sorted(quarantine[["file", "row", "reason", "column"]].values.tolist()) == [
        ["dt=2026-03-05/part-00000.parquet", 30, "bad_label", "label"],
        ["dt=2026-03-05/part-00000.parquet", 120, "null_user_id", "user_id"],
        ["dt=2026-03-05/part-00000.parquet", 250, "bad_label", "label"],
        ["dt=2026-03-05/part-00000.parquet", 299, "null_user_id", "user_id"],
    ]
    # the reported row is the row: its original values come back with it
    by_row = quarantine.set_index("row")
    assert by_row.loc[250, "label"] == "2" and by_row.loc[250, "item_id"] == str(
        frame.loc[250, "item_id"]
    )
    assert pd.isna(by_row.loc[120, "user_id"]) and by_row.loc[120, "item_id"] == str(
        frame.loc[120, "item_id"]
    )


def test_schedulers_give_identical_bytes(raw_days, tmp_path):
    raw, _ = raw_days(days=6, rows=300)
    run(raw, tmp_path / "threads")
    run(raw, tmp_path / "processes", scheduler="processes", workers=2)
    for split in SPLITS:
        for path in (tmp_path / "threads" / split).glob("*.npy"):
            assert path.read_bytes() == (tmp_path / "processes" / split / path.name).read_bytes()


def test_local_cluster_scheduler_runs(raw_days, tmp_path):
    raw, _ = raw_days(days=6, rows=300)
    a = run(raw, tmp_path / "threads")
    b = run(raw, tmp_path / "cluster", scheduler="local-cluster", workers=2)
    assert a.fingerprint == b.fingerprint
    assert (tmp_path / "threads/test/hist_item.npy").read_bytes() == (
        tmp_path / "cluster/test/hist_item.npy"
    ).read_bytes()


# -- structural problems stop the run with the file and column named ---------------


def test_missing_column_names_file_and_column(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=50)
    day = START + dt.timedelta(days=3)
    write_day(raw, day, frames[day].drop(columns="label"), fmt="csv", name="broken")
    with pytest.raises(
        InputError, match=r"'dt=2026-03-04/broken\.csv': missing required column 'label'"
    ):
        run(raw, tmp_path / "ds")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", r"empty \(0 bytes\)"),
        (b"PAR1 this is not parquet", "unreadable Parquet"),
    ],
)
def test_empty_or_corrupt_file_is_named(raw_days, tmp_path, content, message):
    raw, _ = raw_days(days=6, rows=50)
    bad = raw / "dt=2026-03-05" / "part-00001.parquet"
    bad.write_bytes(content)
    with pytest.raises(InputError, match=rf"'dt=2026-03-05/part-00001\.parquet': .*{message}"):
        run(raw, tmp_path / "ds")


def test_no_data_in_window_and_no_folders(raw_days, tmp_path):
    raw, _ = raw_days(days=6, rows=50)
    with pytest.raises(InputError, match="no raw files for the window 2026-04-07 .. 2026-04-10"):
        run(raw, tmp_path / "ds", end_date=dt.date(2026, 4, 10))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no day folders"):
        run(tmp_path / "empty", tmp_path / "ds")
    with pytest.raises(InputError, match="does not exist"):
        run(tmp_path / "nowhere", tmp_path / "ds")


def test_missing_split_days_are_an_error_naming_the_split(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=50)
    # the window ends on a day with no folder: no test data at all
    with pytest.raises(
        InputError, match=r"no raw files for the test split \(2026-03-07 .. 2026-03-07\)"
    ):
        run(raw, tmp_path / "ds", end_date=dt.date(2026, 3, 7))
    # the val day has a file, but every row in it is unusable
    val_day = START + dt.timedelta(days=4)
    write_day(raw, val_day, frames[val_day].assign(label=5))
    with pytest.raises(
        InputError, match=r"the val split \(2026-03-05 .. 2026-03-05\) has no usable rows"
    ):
        run(
            raw, tmp_path / "ds", max_quarantine_fraction=1.0
        )  # the per-day limit would stop it first
    assert not (tmp_path / "ds").exists()


def test_too_much_quarantine_stops_with_an_example(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=50)
    for day, frame in frames.items():  # timestamps in milliseconds: every row out of range
        write_day(raw, day, frame.assign(timestamp=frame["timestamp"] * 1000))
    with pytest.raises(
        InputError,
        match=r"timestamp_out_of_range .* column 'timestamp'.*'dt=2026-03-0\d/part-00000"
        r"\.parquet' row \d+.*look like epoch milliseconds",
    ):
        run(raw, tmp_path / "ds")


# -- atomic writes ------------------------------------------------------------------


def test_failed_run_leaves_previous_output_untouched(raw_days, tmp_path, monkeypatch):
    raw, _ = raw_days(days=6, rows=100)
    out = tmp_path / "ds"
    good = run(raw, out)
    snapshot = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def explode(*args, **kwargs):
        raise RuntimeError("killed while assembling")

    monkeypatch.setattr(stage, "_assemble", explode)
    with pytest.raises(RuntimeError, match="killed"):
        run(raw, out, force=True)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot
    assert json.loads((out / "meta.json").read_text())["fingerprint"] == good.fingerprint
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_leftovers_of_a_killed_run_are_cleaned_and_never_look_complete(raw_days, tmp_path):
    raw, _ = raw_days(days=6, rows=100)
    leftover = tmp_path / "ds.tmp-deadbeef0000"
    (leftover / "train").mkdir(parents=True)
    run(raw, tmp_path / "ds")
    assert not leftover.exists()
    assert (tmp_path / "ds" / "meta.json").exists()


# -- the CLI ------------------------------------------------------------------------


def test_cli_reports_bad_input_in_one_line_and_exits_nonzero(raw_days, tmp_path):
    raw, frames = raw_days(days=6, rows=50)
    write_day(raw, START, frames[START].drop(columns="item_id"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.preprocess",
            "--raw",
            str(raw),
            "--out",
            str(tmp_path / "ds"),
            "--days",
            "4",
            "--history-days",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == [
        "preprocess: error: 'dt=2026-03-01/part-00000.parquet': missing required column "
        "'item_id' (has: 'user_id', 'category_id', 'timestamp', 'label'; required: user_id, "
        "item_id, timestamp, label)"
    ]
    assert "Traceback" not in proc.stderr


def test_ids_hash_under_the_deployments_secret_recorded_by_fingerprint(
    raw_days, tmp_path, monkeypatch, caplog
):
    from components.common import hashing

    raw, _ = raw_days(days=6, rows=300)
    monkeypatch.delenv(hashing.KEY_ENV, raising=False)
    public = run(raw, tmp_path / "public")
    assert "public default key" in caplog.text
    caplog.clear()
    monkeypatch.setenv(hashing.KEY_ENV, "this-deployment-s-own-secret")
    secret = run(raw, tmp_path / "secret")
    assert "public default key" not in caplog.text
    assert secret.buckets["key_fingerprint"] == hashing.key_fingerprint()
    assert public.buckets["key_fingerprint"] == hashing.key_fingerprint(hashing.HASH_KEY)
    assert secret.fingerprint != public.fingerprint  # another key: another dataset
    text = (tmp_path / "secret" / "meta.json").read_text()
    assert "this-deployment-s-own-secret" not in text and hashing.id_hash_key() not in text
    keys = {s: np.load(tmp_path / s / "train" / "user_key.npy") for s in ("public", "secret")}
    assert len(keys["public"]) == len(keys["secret"])
    assert not set(keys["public"].tolist()) & set(keys["secret"].tolist())
    monkeypatch.setenv(hashing.KEY_ENV, "too-short")
    with pytest.raises(InputError, match="DAILYREC_ID_KEY has 9 characters"):
        run(raw, tmp_path / "short")
