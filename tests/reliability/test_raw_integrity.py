"""Raw-input integrity: ids never collide, time types never merge rows, nothing in the raw folder
is skipped without a word, and file names cannot forge a log line.

Each class of defect is checked across its kinds (every id type with and without nulls, every
timestamp type, every folder/file naming fault), on tiny raw folders through the real stage.
"""

from __future__ import annotations

import bz2
import datetime as dt
import decimal
import gzip
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.common import schema
from components.common.dataset_meta import DatasetMeta
from components.common.hashing import HASH_KEY, id_keys
from components.preprocess.config import PreprocessConfig
from components.preprocess.errors import InputError
from components.preprocess.stage import format_summary, preprocess
from tests.conftest import START, random_events, write_day
from tests.reference import siphash24, splitmix64_finalizer

pytestmark = pytest.mark.integration
CATEGORY = "raw-input integrity"
DAYS = [START + dt.timedelta(days=i) for i in range(4)]  # 2026-03-01 .. 03-04
END = DAYS[-1]
CONFIG = {
    "days": 3,
    "history_days": 1,
    "seq_len": 3,
    "item_buckets": 64,
    "category_buckets": 8,
    "user_buckets": 32,
    "scheduler": "sync",
}
ROOT = Path(__file__).resolve().parents[2]


def make_raw(
    root: Path, rows: int = 24, seed: int = 0, fmt: str = "parquet", days: list[dt.date] = DAYS
) -> dict[dt.date, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    frames = {}
    for day in days:
        frames[day] = random_events(rng, day, rows)
        write_day(root, day, frames[day], fmt)
    return frames


def run(raw: Path, out: Path, **overrides) -> DatasetMeta:
    return preprocess(PreprocessConfig(raw=str(raw), out=str(out), **(CONFIG | overrides)))


def books_balance(meta: DatasetMeta) -> None:
    rows = meta.rows
    assert (
        rows["read"]
        == sum(rows["kept"].values()) + rows["quarantined_total"] + rows["duplicates_dropped"]
    )
    by_day = rows["by_day"]
    assert sum(d["read"] for d in by_day.values()) == rows["read"]
    assert sum(d["quarantined"] for d in by_day.values()) == rows["quarantined_total"]
    assert sum(d["duplicates"] for d in by_day.values()) == rows["duplicates_dropped"]


def events(out: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in sorted((out / "events").glob("*.parquet"))])


def same_dataset(tmp_path: Path, raw: Path, baseline: DatasetMeta) -> DatasetMeta:
    """Run on ``raw`` into ``tmp_path/ds``: the same rows, books and events as ``tmp_path/base``."""
    meta = run(raw, tmp_path / "ds")
    books_balance(meta)
    for key in ("read", "kept", "duplicates_dropped"):
        assert meta.rows[key] == baseline.rows[key], key
    pd.testing.assert_frame_equal(
        events(tmp_path / "ds").reset_index(drop=True),
        events(tmp_path / "base").reset_index(drop=True),
    )
    return meta


def reference_key(text: str) -> int:
    """The key of an id's decimal text: SipHash-2-4 + splitmix64 (pure Python)."""
    return np.uint64(splitmix64_finalizer(siphash24(HASH_KEY.encode(), text.encode()))).view(
        np.int64
    )


# -- 1. ids never collide, whatever the physical type and nulls ---------------------------------

BIG = [2**53 + i for i in (1, 2, 3)] + [
    2**63 - 1,
    17,
    0,
]  # distinct in int64, equal once in float64
UNSIGNED = [2**63 + 5, 2**64 - 1]


def _id_arrays(values: list[int], with_null: bool) -> dict[str, pa.Array]:
    """The same ids as every physical type a writer may choose (no pandas metadata)."""
    ids = values + ([None] if with_null else [])
    dec = [None if v is None else decimal.Decimal(v) for v in ids]
    out = {
        "uint64": pa.array(ids, pa.uint64()) if min(values) >= 0 else None,
        "decimal(38,0)": pa.array(dec, pa.decimal128(38, 0)),
        "decimal(30,2)": pa.array(dec, pa.decimal128(30, 2)),
        "decimal256(50,0)": pa.array(dec, pa.decimal256(50, 0)),
        "string": pa.array([None if v is None else str(v) for v in ids], pa.string()),
        "large_string": pa.array([None if v is None else str(v) for v in ids], pa.large_string()),
        "dictionary<string>": pa.array(
            [None if v is None else str(v) for v in ids]
        ).dictionary_encode(),
    }
    if max(values) < 2**63:
        out["int64"] = pa.array(ids, pa.int64())
        out["dictionary<int64>"] = pa.array(ids, pa.int64()).dictionary_encode()
    if max(values) < 2**31:
        out["int32"] = pa.array(ids, pa.int32())
        out["uint16"] = pa.array(ids, pa.uint16()) if max(values) < 2**16 else None
    if max(values) <= 2**53:
        out["float64"] = pa.array([None if v is None else float(v) for v in ids], pa.float64())
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize(
    "values",
    [BIG, UNSIGNED, [17, 3, 250], [2**53, -5, 42]],
    ids=["above-2^53", "above-2^63", "small", "2^53-and-negative"],
)
@pytest.mark.parametrize("with_null", [False, True], ids=["no-null", "null"])
def test_same_ids_same_keys_for_every_type_with_and_without_nulls(values, with_null, fault_report):
    expected = np.array([reference_key(str(v)) for v in values], np.int64)
    for name, array in _id_arrays(values, with_null).items():
        # through a Parquet file written by pyarrow (no pandas metadata), as Spark/DuckDB write them
        keys, null, invalid = id_keys(pa.table({"id": array}).column("id"))
        np.testing.assert_array_equal(keys[: len(values)], expected, err_msg=name)
        assert null.tolist() == [False] * len(values) + [True] * with_null, name
        assert not invalid.any(), name
    assert len(set(expected.tolist())) == len(values)
    fault_report(
        CATEGORY,
        f"ids {values[:2]}... as int/uint/decimal/float/string/dictionary, "
        f"{'with' if with_null else 'without'} a null",
        "identical keys for every type; distinct ids stay distinct",
    )


def test_integer_and_string_ids_keep_todays_keys():
    """int64 without nulls and strings are today's common types: their keys must not move."""
    assert (
        id_keys(pa.array([17], pa.int64()))[0][0]
        == id_keys(pa.array(["17"]))[0][0]
        == reference_key("17")
    )
    # pinned value: a change here re-buckets every existing dataset and model
    assert int(id_keys(pa.array(["17"]))[0][0]) == int(reference_key("17"))


@pytest.mark.parametrize(
    ("array", "reasons"),
    [
        (
            pa.array([1.5, float("inf"), float("-inf"), float("nan"), 7.0]),
            ["bad", "bad", "bad", "null", "ok"],
        ),
        (pa.array([2.0**53 + 2, 2.0**63, 2.0**53], pa.float64()), ["bad", "bad", "ok"]),
        (pa.array([2.0**24 + 2, 3.0], pa.float32()), ["bad", "ok"]),
        (
            pa.array([decimal.Decimal("1.50"), decimal.Decimal("2.00")], pa.decimal128(10, 2)),
            ["bad", "ok"],
        ),
    ],
)
def test_values_that_cannot_be_ids_are_invalid_not_rounded(array, reasons):
    keys, null, invalid = id_keys(array)
    got = ["null" if n else "bad" if b else "ok" for n, b in zip(null, invalid, strict=True)]
    assert got == reasons
    assert (keys[null | invalid] == 0).all()


def test_big_ids_with_a_null_stay_distinct_end_to_end(tmp_path, fault_report):
    """49 users above 2**53 in a file with one null user: 49 keys, equal to the null-free day's."""
    keys = {}
    for variant, with_null in (
        ("int64", False),
        ("uint64-null", True),
        ("decimal-null", True),
        ("string-null", True),
    ):
        raw = tmp_path / variant / "raw"
        frames = make_raw(raw, rows=49)
        for day, frame in frames.items():
            users = [2**62 + 2**53 + int(u) for u in range(49)]
            ids = users[:-1] + ([None] if with_null else users[-1:])
            array = {
                "int64": pa.array(ids, pa.int64()),
                "uint64-null": pa.array(ids, pa.uint64()),
                "decimal-null": pa.array(
                    [None if v is None else decimal.Decimal(v) for v in ids], pa.decimal128(38, 0)
                ),
                "string-null": pa.array([None if v is None else str(v) for v in ids]),
            }[variant]
            table = pa.table(
                {
                    "user_id": array,
                    "item_id": pa.array(frame["item_id"], pa.int64()),
                    "timestamp": pa.array(frame["timestamp"], pa.int64()),
                    "label": pa.array(frame["label"], pa.int8()),
                }
            )
            (raw / schema.day_folder_name(day) / "part-00000.parquet").unlink()
            pq.write_table(table, raw / schema.day_folder_name(day) / "part-00000.parquet")
        meta = run(raw, tmp_path / variant / "ds")
        books_balance(meta)
        assert meta.rows["quarantined"] == ({"null_user_id": len(DAYS)} if with_null else {})
        keys[variant] = set(events(tmp_path / variant / "ds")["user_key"])
    assert len(keys["int64"]) == 49
    for variant in ("uint64-null", "decimal-null", "string-null"):
        assert keys[variant] == keys["int64"] - {reference_key(str(2**62 + 2**53 + 48))}, variant
    fault_report(
        CATEGORY,
        "49 int64 ids > 2^53 in a Parquet column with one null (uint64/decimal/string)",
        "49 distinct keys, equal to the null-free day's; the null row quarantined",
    )


def test_csv_ids_written_through_float_are_the_integer_ids(tmp_path, fault_report):
    """pandas writes an integer column holding a NaN as 17.0: the same users as the int64 day."""
    keys = {}
    for variant in ("int64", "float csv"):
        raw = tmp_path / variant / "raw"
        frames = make_raw(raw)
        if variant == "float csv":
            for day, frame in frames.items():
                (raw / schema.day_folder_name(day) / "part-00000.parquet").unlink()
                users = frame["user_id"].astype(float)
                users.iloc[0] = np.nan
                frame.assign(user_id=users).to_csv(
                    raw / schema.day_folder_name(day) / "part-00000.csv", index=False
                )
                text = (raw / schema.day_folder_name(day) / "part-00000.csv").read_text()
                assert re.search(r"^\d+\.0,", text, re.MULTILINE), text[:200]  # as pandas writes it
        meta = run(raw, tmp_path / variant / "ds", max_quarantine_fraction=0.2)
        books_balance(meta)
        keys[variant] = set(events(tmp_path / variant / "ds")["user_key"])
    assert keys["float csv"] <= keys["int64"] and len(keys["float csv"]) >= len(keys["int64"]) - 3
    fault_report(
        CATEGORY,
        "CSV ids written through float by pandas (17.0, a null in the column)",
        "read as the integer ids: the same keys as the int64 day",
    )


# -- 1b. timestamp types: lossy or date-only types refused, never rows merged -------------------


def _day_table(frame: pd.DataFrame, timestamp: pa.Array) -> pa.Table:
    return pa.table(
        {
            "user_id": pa.array(frame["user_id"], pa.int64()),
            "item_id": pa.array(frame["item_id"], pa.int64()),
            "timestamp": timestamp,
            "label": pa.array(frame["label"], pa.int8()),
        }
    )


@pytest.mark.parametrize(
    ("type_", "words"),
    [
        (pa.float32(), "float32 rounds them to 128-second steps"),
        (pa.float16(), "halffloat"),
        (pa.date32(), "date-only type date32"),
        (pa.date64(), "date-only type date"),  # Parquet stores every date as date32
        (pa.time64("us"), "has type time64"),
        (pa.duration("s"), "has type duration"),
        (pa.bool_(), "has type bool"),
    ],
)
def test_lossy_or_date_only_timestamp_types_are_refused_naming_file_and_column(
    tmp_path, type_, words, fault_report
):
    raw = tmp_path / "raw"
    frames = make_raw(raw)
    day = DAYS[2]
    seconds = frames[day]["timestamp"]
    values = {
        "date32[day]": lambda: pa.array([dt.date(2026, 3, 3)] * len(seconds), type_),
        "date64[ms]": lambda: pa.array([dt.date(2026, 3, 3)] * len(seconds), type_),
        "halffloat": lambda: pa.array(np.zeros(len(seconds), np.float16), type_),
        "time64[us]": lambda: pa.array([dt.time(1)] * len(seconds), type_),
        "duration[s]": lambda: pa.array(seconds, pa.int64()).cast(type_),
        "bool": lambda: pa.array([True] * len(seconds)),
    }.get(str(type_), lambda: pa.array(seconds, pa.float64()).cast(type_, safe=False))()
    path = raw / schema.day_folder_name(day) / "part-00000.parquet"
    pq.write_table(_day_table(frames[day], values), path)
    with pytest.raises(
        InputError, match=r"^'dt=2026-03-03/part-00000\.parquet': column 'timestamp' "
    ) as caught:
        run(raw, tmp_path / "ds", end_date=END)
    message = str(caught.value)
    assert message.startswith("'dt=2026-03-03/part-00000.parquet': column 'timestamp' "), message
    assert words in message and "\n" not in message
    assert not (tmp_path / "ds").exists()
    fault_report(
        CATEGORY,
        f"timestamp column of type {type_}",
        "InputError naming file and column before any row is read",
    )


@pytest.mark.parametrize(
    "kind",
    [
        "int64 seconds",
        "float64 seconds",
        "timestamp[s]",
        "timestamp[ms, UTC]",
        "timestamp[us, +02:00]",
        "timestamp[ns]",
        "ISO text",
        "decimal seconds",
    ],
)
def test_accepted_timestamp_types_give_the_same_dataset(tmp_path, kind, fault_report):
    raw = tmp_path / "raw"
    frames = make_raw(raw)
    baseline = run(raw, tmp_path / "base")
    for day, frame in frames.items():
        seconds = frame["timestamp"].to_numpy()
        stamps = pa.array(seconds * 10**9, pa.timestamp("ns", tz="UTC"))
        values = {
            "int64 seconds": pa.array(seconds, pa.int64()),
            "float64 seconds": pa.array(seconds + 0.75, pa.float64()),  # fraction floored
            "timestamp[s]": stamps.cast(pa.timestamp("s")),
            "timestamp[ms, UTC]": stamps.cast(pa.timestamp("ms", tz="UTC")),
            "timestamp[us, +02:00]": stamps.cast(pa.timestamp("us", tz="+02:00")),
            "timestamp[ns]": stamps.cast(pa.timestamp("ns")),
            "ISO text": pa.array(
                [dt.datetime.fromtimestamp(int(s), dt.UTC).isoformat() for s in seconds]
            ),
            "decimal seconds": pa.array(
                [decimal.Decimal(int(s)) + decimal.Decimal("0.5") for s in seconds],
                pa.decimal128(15, 3),
            ),
        }[kind]
        path = raw / schema.day_folder_name(day) / "part-00000.parquet"
        pq.write_table(
            _day_table(frame, values).append_column(
                "category_id", pa.array(frame["category_id"], pa.int64())
            ),
            path,
        )
    same_dataset(tmp_path, raw, baseline)
    fault_report(
        CATEGORY, f"timestamp as {kind}", "accepted; the same rows and times as int64 seconds"
    )


def test_date_only_iso_text_is_quarantined_not_midnight(tmp_path, fault_report):
    raw = tmp_path / "raw"
    frames = make_raw(raw, fmt="csv")
    day = DAYS[1]  # the train day
    stamps = [
        dt.datetime.fromtimestamp(int(s), dt.UTC).isoformat() for s in frames[day]["timestamp"]
    ]
    stamps[:12] = ["2026-03-02"] * 12  # the first half: a date, no time of day
    frames[day].assign(timestamp=stamps).to_csv(
        raw / schema.day_folder_name(day) / "part-00000.csv", index=False
    )
    with pytest.raises(
        InputError,
        match=r"^'dt=2026-03-02': 12 of 24 rows of this day .*bad_timestamp .*"
        r"column 'timestamp'.*value '2026-03-02'",
    ):
        run(raw, tmp_path / "ds")
    meta = run(raw, tmp_path / "ds", max_quarantine_fraction=1.0)
    assert meta.rows["quarantined"] == {"bad_timestamp": 12}
    assert meta.rows["by_day"]["2026-03-02"]["duplicates"] == 0
    books_balance(meta)
    fault_report(
        CATEGORY, "ISO dates without a time of day", "quarantined bad_timestamp, never merged"
    )


def test_a_whole_day_in_milliseconds_fails_even_under_the_window_limit(tmp_path, fault_report):
    """One day of twelve in ms is 8% of the window (under 10%) but 100% of its day."""
    days = [START + dt.timedelta(days=i) for i in range(12)]
    raw = tmp_path / "raw"
    frames = make_raw(raw, rows=20, days=days)
    day = days[5]
    write_day(raw, day, frames[day].assign(timestamp=frames[day]["timestamp"] * 1000))
    with pytest.raises(
        InputError,
        match=r"^'dt=2026-03-06': 20 of 20 rows of this day \(100\.0%\) failed "
        r"validation.*timestamp_out_of_range.*look like epoch milliseconds",
    ):
        run(raw, tmp_path / "ds", days=11, history_days=1)
    fault_report(
        CATEGORY,
        "one day of 12 in epoch milliseconds (8% of the window)",
        "InputError naming the day: the quarantine limit holds per day",
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_decimal_labels_are_numbers(tmp_path, fmt, fault_report):
    raw = tmp_path / "raw"
    frames = make_raw(raw, fmt=fmt)
    baseline = run(raw, tmp_path / "base")
    day = DAYS[3]
    frame = frames[day]
    if fmt == "csv":
        frame.assign(label=frame["label"].map({0: "0.00", 1: "1.00"})).to_csv(
            raw / schema.day_folder_name(day) / "part-00000.csv", index=False
        )
    else:
        labels = pa.array([decimal.Decimal(f"{v}.00") for v in frame["label"]], pa.decimal128(3, 2))
        table = _day_table(frame, pa.array(frame["timestamp"], pa.int64())).set_column(
            3, "label", labels
        )
        pq.write_table(table, raw / schema.day_folder_name(day) / "part-00000.parquet")
    meta = run(raw, tmp_path / "ds")
    assert meta.rows["quarantined"] == {}
    assert meta.splits == baseline.splits
    fault_report(
        CATEGORY,
        f"labels 0.00/1.00 ({'CSV text' if fmt == 'csv' else 'Parquet decimal'})",
        "accepted as 0/1",
    )


# -- 1c. duplicates are counted per day and bounded ----------------------------------------------


def test_duplicates_per_day_in_meta_summary_and_limit(tmp_path, fault_report):
    raw = tmp_path / "raw"
    frames = make_raw(raw)
    day = DAYS[2]
    write_day(raw, day, frames[day].iloc[:2], "csv", name="copy")  # 2 of 26 rows: 7.7%
    meta = run(raw, tmp_path / "ds")
    books_balance(meta)
    assert meta.rows["by_day"]["2026-03-03"] == {"read": 26, "quarantined": 0, "duplicates": 2}
    assert meta.rows["by_day"]["2026-03-02"]["duplicates"] == 0
    assert "exact duplicates by day: 2026-03-03 2" in format_summary(meta)
    write_day(raw, day, frames[day].iloc[:6], "csv", name="copy")  # 6 of 30: 20%
    with pytest.raises(
        InputError,
        match=r"^'dt=2026-03-03': 6 of 30 rows \(20\.0%\) are exact duplicates .*"
        r"max_duplicate_fraction=0\.1; files: 'dt=2026-03-03/copy\.csv', "
        r"'dt=2026-03-03/part-00000\.parquet'",
    ):
        run(raw, tmp_path / "ds2")
    assert not (tmp_path / "ds2").exists()
    books_balance(run(raw, tmp_path / "ds3", max_duplicate_fraction=0.25))
    fault_report(
        CATEGORY,
        "a day with 20% exact duplicates (a file written twice)",
        "counted per day in meta.json and the summary; InputError naming the day and files "
        "above max_duplicate_fraction",
    )


def test_duplicate_limit_is_a_flag_with_help_and_default():
    from components.preprocess.__main__ import build_parser

    parser = build_parser()
    help_text = " ".join(parser.format_help().split())
    assert "--max-duplicate-fraction" in help_text and "(default: 0.1)" in help_text
    assert parser.parse_args(["--raw", "r", "--out", "o"]).max_duplicate_fraction == 0.1
    assert (
        parser.parse_args(
            ["--raw", "r", "--out", "o", "--max-duplicate-fraction", "0.3"]
        ).max_duplicate_fraction
        == 0.3
    )
    with pytest.raises(ValueError, match=r"max_duplicate_fraction must be in \[0, 1\], got 1\.5"):
        PreprocessConfig(raw="r", out="o", max_duplicate_fraction=1.5)
    with pytest.raises(ValueError, match=r"max_duplicate_fraction must be in \[0, 1\], got nan"):
        PreprocessConfig(raw="r", out="o", max_duplicate_fraction=float("nan"))


# -- 2. nothing in the raw folder skipped without a word -----------------------------------------


@pytest.mark.parametrize(
    ("name", "end_date", "history_days"),
    [
        (
            "dt=2026-3-5",
            None,
            1,
        ),  # non-padded, after the latest day: the window would end a day early
        ("dt=2026-13-45", None, 1),  # no date, but it sorts after the latest day
        ("dt=20260305", None, 1),
        ("date=2026-03-05", None, 1),  # another partition key
        ("DT=2026-03-05", None, 1),
        ("2026-03-05", None, 1),
        ("dt=2026-03-04.bak", None, 1),  # a copy of the latest day: which one is meant?
        ("dt=2026-02-30", END, 4),  # no date, inside the days read (02-26 .. 03-04)
        ("dt=2026-3-3", END, 1),  # non-padded, inside the window
    ],
)
def test_misnamed_day_folders_that_may_hold_window_days_are_an_error(
    tmp_path, name, end_date, history_days, fault_report
):
    raw = tmp_path / "raw"
    make_raw(raw, days=[START - dt.timedelta(days=2), *DAYS])
    (raw / name).mkdir()
    write_day(raw, DAYS[0], random_events(np.random.default_rng(1), DAYS[0], 5), name="x")
    (raw / name / "part-00000.parquet").write_bytes(
        (raw / schema.day_folder_name(DAYS[0]) / "x.parquet").read_bytes()
    )
    with pytest.raises(
        InputError,
        match=rf"folder '{re.escape(name)}' is a (misnamed day folder|not a calendar date)"
        r".* may hold days of the window .*rename it",
    ):
        run(raw, tmp_path / "ds", end_date=end_date, history_days=history_days)
    fault_report(
        CATEGORY,
        f"day folder {name!r} ({'window ends at the latest day' if end_date is None else 'inside the window'})",
        "InputError naming the folder",
    )


def test_everything_not_read_is_listed_with_its_reason_and_warned(tmp_path, caplog, fault_report):
    raw = tmp_path / "raw"
    make_raw(raw)
    day = raw / "dt=2026-03-03"
    (raw / "dt=2026-3-9").mkdir()  # misnamed but after the given end: cannot be a window day
    (raw / "dt=2026-02-30").mkdir()  # before the window's first read day (03-02)
    (raw / "dt=latest").mkdir()
    (raw / "_temporary").mkdir()
    (raw / "README.md").write_text("notes")
    (raw / "loose.parquet").write_bytes(b"PAR1")
    for name in ("_SUCCESS", ".part-00000.parquet.crc", "notes.txt", "part-00000.json"):
        (day / name).write_bytes(b"x")
    (day / "_temporary").mkdir()
    (day / "_temporary" / "part-9.parquet").write_bytes(b"junk")
    os.symlink(tmp_path / "nowhere", day / "gone.parquet")
    with caplog.at_level(logging.WARNING, logger="components.preprocess.stage"):
        meta = run(raw, tmp_path / "ds", end_date=END)
    books_balance(meta)
    ignored = {i["path"]: i["reason"] for i in meta.inputs["ignored"]}
    assert ignored == {
        "README.md": "file outside a day folder (raw files go in dt=YYYY-MM-DD/)",
        "_temporary": "hidden or marker folder (name starts with '.' or '_')",
        "dt=2026-02-30": "not a calendar date (expected dt=YYYY-MM-DD)",
        "dt=2026-3-9": "misnamed day folder (expected 'dt=2026-03-09')",
        "dt=latest": "not a day folder name (expected dt=YYYY-MM-DD)",
        "loose.parquet": "file outside a day folder (raw files go in dt=YYYY-MM-DD/)",
        "dt=2026-03-03/.part-00000.parquet.crc": "hidden or marker file (name starts with '.' or '_')",
        "dt=2026-03-03/_SUCCESS": "hidden or marker file (name starts with '.' or '_')",
        "dt=2026-03-03/_temporary": "hidden or marker folder (name starts with '.' or '_')",
        "dt=2026-03-03/gone.parquet": "broken symbolic link",
        "dt=2026-03-03/notes.txt": "not a raw data file (accepted: .parquet, .pq, .csv, .csv.gz, .csv.gzip, "
        ".csv.bz2, .csv.zst, .csv.zstd)",
        "dt=2026-03-03/part-00000.json": "not a raw data file (accepted: .parquet, .pq, .csv, .csv.gz, "
        ".csv.gzip, .csv.bz2, .csv.zst, .csv.zstd)",
    }
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("not read: ")]
    markers = {p for p in ignored if p.rsplit("/", 1)[-1].startswith(("_", "."))}
    assert len(markers) == 4 and len(warned) == len(ignored) - len(markers)
    assert not [w for w in warned if any(repr(m) in w for m in markers)]  # by convention: quiet
    assert "not read: 'dt=2026-03-03/gone.parquet' (broken symbolic link)" in warned
    assert "not read: 8 paths" in format_summary(meta)
    assert "passed over: 4 hidden or marker paths" in format_summary(meta)
    fault_report(
        CATEGORY,
        "impossible/misnamed day folders outside the window, _SUCCESS, .crc, _temporary, "
        "notes, a broken link, files outside day folders",
        "listed in meta.json inputs.ignored with the reason, one warning each (hidden and marker "
        "entries, a convention, without one)",
    )


def test_last_day_missing_or_without_raw_files_is_an_error(tmp_path, fault_report):
    raw = tmp_path / "raw"
    make_raw(raw)
    with pytest.raises(
        InputError,
        match=r"no raw files for the window's last day 2026-03-05 \(expected in "
        r"'dt=2026-03-05', which does not exist\)",
    ):
        run(raw, tmp_path / "ds", end_date=dt.date(2026, 3, 5), days=4, test_days=2)
    last = raw / schema.day_folder_name(END)
    for f in last.iterdir():
        f.unlink()
    (last / "_SUCCESS").write_bytes(b"")
    (last / "events.txt").write_bytes(b"x")
    with pytest.raises(
        InputError, match=r"no raw files for the (window's last day 2026-03-04|test split)"
    ):
        run(raw, tmp_path / "ds", end_date=END)
    with pytest.raises(
        InputError, match=r"no raw files for the (window's last day 2026-03-04|test split)"
    ):
        run(raw, tmp_path / "ds")
    fault_report(
        CATEGORY,
        "the window's last day folder missing, or holding no raw file",
        "InputError naming the day (never a window that silently ends a day early)",
    )


def test_days_of_the_window_without_raw_files_are_reported(tmp_path, caplog, fault_report):
    raw = tmp_path / "raw"
    make_raw(raw)
    for f in (raw / "dt=2026-03-01").iterdir():  # the look-back day's folder left empty
        f.unlink()
    with caplog.at_level(logging.WARNING, logger="components.preprocess.stage"):
        meta = run(raw, tmp_path / "ds2")
    assert meta.inputs["days_without_files"] == ["2026-03-01"]
    assert "no raw files for 2026-03-01" in [r.getMessage() for r in caplog.records]
    fault_report(
        CATEGORY,
        "a day folder of the look-back window left empty",
        "listed in meta.json inputs.days_without_files and warned",
    )


def _compress(data: bytes, kind: str) -> bytes:
    if kind == "gz":
        return gzip.compress(data)
    if kind == "bz2":
        return bz2.compress(data)
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


def test_compressed_csv_nested_partitions_pq_and_symlinks_are_read(tmp_path, fault_report):
    raw = tmp_path / "raw"
    frames = make_raw(raw)
    baseline = run(raw, tmp_path / "base")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for i, (day, frame) in enumerate(frames.items()):
        folder = raw / schema.day_folder_name(day)
        (folder / "part-00000.parquet").unlink()
        text = frame.to_csv(index=False).encode()
        if i == 0:  # gzip, bzip2 and zstd CSV, a third of the rows each
            third = len(frame) // 3
            for kind, part in (
                ("gz", frame.iloc[:third]),
                ("bz2", frame.iloc[third : 2 * third]),
                ("zst", frame.iloc[2 * third :]),
            ):
                (folder / f"events.csv.{kind}").write_bytes(
                    _compress(part.to_csv(index=False).encode(), kind)
                )
        elif i == 1:  # Spark: dt=.../hour=HH/part-....snappy.parquet, plus its markers
            for hour, part in ((0, frame.iloc[:10]), (13, frame.iloc[10:])):
                sub = folder / f"hour={hour:02d}"
                sub.mkdir()
                pq.write_table(
                    pa.Table.from_pandas(part, preserve_index=False),
                    sub / "part-00000-1f2e.c000.snappy.parquet",
                )
                (sub / "_SUCCESS").write_bytes(b"")
        elif i == 2:  # .pq, and the file is a symbolic link to a file elsewhere
            frame.to_parquet(outside / "day2.pq", index=False)
            os.symlink(outside / "day2.pq", folder / "events.pq")
        else:  # the whole day folder is a symbolic link
            folder.rmdir()
            target = outside / "day3"
            target.mkdir()
            (target / "events.csv").write_bytes(text)
            os.symlink(target, folder, target_is_directory=True)
            os.symlink(target, target / "loop", target_is_directory=True)  # a link loop inside
    meta = same_dataset(tmp_path, raw, baseline)
    assert sorted(meta.inputs["files"]) == sorted(
        [
            "dt=2026-03-01/events.csv.bz2",
            "dt=2026-03-01/events.csv.gz",
            "dt=2026-03-01/events.csv.zst",
            "dt=2026-03-02/hour=00/part-00000-1f2e.c000.snappy.parquet",
            "dt=2026-03-02/hour=13/part-00000-1f2e.c000.snappy.parquet",
            "dt=2026-03-03/events.pq",
            "dt=2026-03-04/events.csv",
        ]
    )
    ignored = {i["path"]: i["reason"] for i in meta.inputs["ignored"]}
    assert ignored["dt=2026-03-04/loop"] == "symbolic link loop"
    assert ignored["dt=2026-03-02/hour=00/_SUCCESS"].startswith("hidden or marker file")
    fault_report(
        CATEGORY,
        "gzip/bzip2/zstd CSV, Spark hour=HH/ sub-folders, .pq, symlinked file and "
        "day folder, a link loop",
        "read: the same rows as plain Parquet; the loop listed as not read",
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "events.csv",
            "parquet",
            r"named as CSV text but holds a Parquet file; rename it to \.parquet",
        ),
        (
            "events.csv",
            "gzip",
            r"named as CSV text but holds gzip-compressed data; rename it to \.csv\.gz",
        ),
        ("events.csv", "zip", r"named as CSV text but holds a ZIP archive; unzip it"),
        (
            "events.csv.gz",
            "csv",
            r"named as gzip-compressed CSV but holds text; rename it to \.csv if it is CSV",
        ),
        ("events.csv.gz", "parquet", r"named as gzip-compressed CSV but holds a Parquet file"),
        ("events.parquet", "gzip", r"named as a Parquet file but holds gzip-compressed data"),
        (
            "events.parquet",
            "csv",
            r"named as a Parquet file but holds text; rename it to \.csv if it is CSV",
        ),
        ("events.csv.gz", "broken gzip", r"unreadable gzip"),
        (
            "events.csv.snappy",
            "csv",
            r"compressed as '\.snappy', which is not read; accepted: \.parquet",
        ),
        ("events.parquet.lz4", "csv", r"compressed as '\.lz4', which is not read"),
    ],
)
def test_a_file_that_is_not_what_its_name_says_is_named_as_such(
    tmp_path, name, content, message, fault_report
):
    raw = tmp_path / "raw"
    frames = make_raw(raw)
    day = DAYS[2]
    text = frames[day].to_csv(index=False).encode()
    import io
    import zipfile

    buffer = io.BytesIO()
    if content == "zip":
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("events.csv", text)
    data = {
        "parquet": (raw / schema.day_folder_name(day) / "part-00000.parquet").read_bytes(),
        "gzip": gzip.compress(text),
        "csv": text,
        "zip": buffer.getvalue(),
        "broken gzip": gzip.compress(text)[:-30],
    }[content]
    (raw / schema.day_folder_name(day) / name).write_bytes(data)
    with pytest.raises(
        InputError, match=rf"^'dt=2026-03-03/{name.replace('.', '[.]')}': .*{message}"
    ) as caught:
        run(raw, tmp_path / "ds")
    assert "re-encode" not in str(caught.value) and "\n" not in str(caught.value)
    fault_report(
        CATEGORY, f"{content} bytes in a file named {name}", "InputError saying what the file holds"
    )


# -- 4. file names cannot forge or break a line ---------------------------------------------------


def test_newline_and_non_utf8_file_names_are_quoted(tmp_path, fault_report):
    raw = tmp_path / "raw"
    frames = make_raw(raw)
    folder = raw / schema.day_folder_name(DAYS[2])
    # a readable file with a non-UTF-8 byte in its name: read, listed with the byte escaped
    odd = os.fsencode(str(folder)) + b"/caf\xe9.parquet"
    with open(odd, "wb") as fh:
        frames[DAYS[2]].iloc[:3].to_parquet(fh, index=False)
    (folder / "note\nERROR fake line.txt").write_bytes(b"x")
    meta = run(raw, tmp_path / "ds", max_duplicate_fraction=0.5)
    books_balance(meta)
    assert "dt=2026-03-03/caf\\xe9.parquet" in meta.inputs["files"]
    assert "dt=2026-03-03/note\nERROR fake line.txt" in [i["path"] for i in meta.inputs["ignored"]]
    # storable: no lone surrogate left
    json.dumps(meta.to_document(), ensure_ascii=False).encode("utf-8")
    # an unreadable file with such names: the error names it, on one printable line
    (folder / "bad\nINFO all good.parquet").write_bytes(b"PAR1 junk")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.preprocess",
            "--raw",
            str(raw),
            "--out",
            str(tmp_path / "ds2"),
            "--days",
            "3",
            "--history-days",
            "1",
            "--scheduler",
            "sync",
        ],
        capture_output=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    stderr = proc.stderr.decode("utf-8")
    assert proc.returncode == 2, stderr
    errors = [line for line in stderr.splitlines() if "preprocess: error" in line]
    assert errors == [
        "preprocess: error: 'dt=2026-03-03/bad\\nINFO all good.parquet': unreadable Parquet "
        "file (" + errors[0].split("unreadable Parquet file (", 1)[1]
    ], stderr
    assert not any(line.startswith("INFO all good") for line in stderr.splitlines())
    assert "not read: 'dt=2026-03-03/note\\nERROR fake line.txt'" in stderr
    assert not any(line.startswith("ERROR fake line") for line in stderr.splitlines())
    os.unlink(folder / "bad\nINFO all good.parquet")
    os.rename(odd, os.fsencode(str(folder)) + b"/bad\xff.csv")
    with pytest.raises(
        InputError,
        match=r"^'dt=2026-03-03/bad\\udcff\.csv': named as CSV text but holds a "
        r"Parquet file",
    ):
        run(raw, tmp_path / "ds3")
    fault_report(
        CATEGORY,
        "a newline / a non-UTF-8 byte in a raw file name",
        "quoted with repr in errors and warnings: one line, the file named",
    )


def test_every_quarantine_reason_is_documented_in_the_raw_contract():
    from components.preprocess.clean import REASONS

    contract = (
        (ROOT / "docs" / "data.md")
        .read_text()
        .split("## Raw data contract", 1)[1]
        .split("\n## ", 1)[0]
    )
    assert [r for r in REASONS if f"`{r}`" not in contract] == []
