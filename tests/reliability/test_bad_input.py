"""Bad raw input, generated: the preprocess stage either stops with an ``InputError`` that names
the file (and the column, when it is about one) or keeps exact books.

Each example writes a tiny raw folder (five day folders: one outside the window, one
look-back day, train, val and test), damages one day with a hypothesis-chosen fault, and
runs the real stage (sync Dask scheduler). Anything but ``InputError`` — a KeyError,
TypeError, ArrowInvalid, UnicodeDecodeError, OutOfBoundsDatetime, a broken row count — fails.

``DAILYREC_BAD_INPUT_EXAMPLES`` raises the examples per fault (default 3) for a deeper run.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.common import schema
from components.common.dataset_meta import DatasetMeta
from components.preprocess import raw as rawio
from components.preprocess.clean import DayWindow, parse_timestamps
from components.preprocess.config import PreprocessConfig
from components.preprocess.errors import InputError
from components.preprocess.stage import preprocess
from tests.conftest import START, random_events, write_day

CATEGORY = "bad input"
# The quarantine reasons the raw contract documents (docs/data.md) and the column each is about
# (spelled out here, not imported, so that a reason added in code without the docs fails this test).
DOCUMENTED_REASONS = {
    "null_user_id": "user_id",
    "bad_user_id": "user_id",
    "null_item_id": "item_id",
    "bad_item_id": "item_id",
    "bad_category_id": "category_id",
    "bad_timestamp": "timestamp",
    "timestamp_out_of_range": "timestamp",
    "bad_label": "label",
}
CONTRACT = ("user_id", "item_id", "category_id", "timestamp", "label")
REQUIRED = ("user_id", "item_id", "timestamp", "label")

ROWS = 24  # rows per file: enough for duplicates and splits, small enough for ~1 s per run
DAYS = [START + dt.timedelta(days=i) for i in range(5)]
OUTSIDE, READ_DAYS = DAYS[0], DAYS[1:]  # day 0 is before the look-back day: never read
CONFIG = {
    "end_date": DAYS[-1],
    "days": 3,
    "history_days": 1,
    "seq_len": 3,
    "item_buckets": 64,
    "category_buckets": 8,
    "user_buckets": 32,
    "scheduler": "sync",
}
SKEW = 3 * 3600
EXAMPLES = int(os.environ.get("DAILYREC_BAD_INPUT_EXAMPLES", "3"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text that survives a CSV round trip as one value (a quoted line break is legal CSV, but it
# makes the expected row count depend on the reader's line splitting, which is not under test).
CSV_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=12
)
ANY_TEXT = st.text(max_size=12)


@dataclass
class Expect:
    """What the damage allows: which files are damaged, and what is known about the outcome."""

    files: list[str]
    """Relative paths of the damaged files: an InputError must name one of them."""
    column: str | None = None
    """The column a structural error must name (None: not about one column)."""
    must_fail: bool = False
    rows_read: int | None = None
    """Exact rows the stage must read (None: a cut file may lose rows)."""
    quarantined: dict[str, int] | None = None
    """Exact per-reason counts, when the fault determines them."""
    min_duplicates: int = 0


@dataclass
class Raw:
    """The raw folder of one example: day -> (format, frame) of its valid base file."""

    root: Path
    base: dict[dt.date, tuple[str, pd.DataFrame]] = field(default_factory=dict)

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def base_path(self, day: dt.date) -> Path:
        fmt, _ = self.base[day]
        return self.root / schema.day_folder_name(day) / f"part-00000.{fmt}"

    def replace(self, day: dt.date, frame: pd.DataFrame, fmt: str) -> Path:
        """Rewrite the day's base file (possibly in the other format)."""
        self.base_path(day).unlink()
        path = write_day(self.root, day, frame, fmt)
        self.base[day] = (fmt, frame)
        return path

    def read_rows(self, extra: int = 0) -> int:
        """Rows of the base files of every day the window reads, plus ``extra`` elsewhere."""
        return sum(len(f) for d, (_, f) in self.base.items() if d in READ_DAYS) + extra


def to_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    if fmt == "csv":
        return frame.to_csv(index=False).encode()
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def rows_subset(data: st.DataObject, n: int, min_size: int = 1) -> list[int]:
    return data.draw(
        st.lists(st.integers(0, n - 1), min_size=min_size, max_size=n, unique=True), label="rows"
    )


# -- the faults: each damages one read day of ``raw`` and says what that allows -------------


def missing_required_column(data, raw: Raw, day: dt.date) -> Expect:
    column = data.draw(st.sampled_from(REQUIRED), label="column")
    fmt = data.draw(st.sampled_from(["csv", "parquet"]), label="fmt")
    path = raw.replace(day, raw.base[day][1].drop(columns=column), fmt)
    return Expect([raw.rel(path)], column=column, must_fail=True)


def optional_missing_and_extra_columns(data, raw: Raw, day: dt.date) -> Expect:
    fmt, frame = raw.base[day]
    if data.draw(st.booleans(), label="drop category"):
        frame = frame.drop(columns="category_id")
    names = data.draw(
        st.lists(
            CSV_TEXT.map(str.strip).filter(lambda s: s and s not in CONTRACT),
            max_size=3,
            unique=True,
        ),
        label="extra names",
    )
    for name in names:
        kind = data.draw(
            st.sampled_from(["int", "text", "nested"] if fmt == "parquet" else ["int", "text"]),
            label="extra kind",
        )
        frame = frame.assign(
            **{
                name: {
                    "int": np.arange(len(frame)),
                    "text": 'x,"y"',
                    "nested": [[1, 2]] * len(frame),
                }[kind]
            }
        )
    path = raw.replace(day, frame, fmt)
    return Expect([raw.rel(path)], rows_read=raw.read_rows(), quarantined={})


def wrong_types(data, raw: Raw, day: dt.date) -> Expect:
    """One column's values of another type (whole column for Parquet, which is typed)."""
    fmt, frame = raw.base[day]
    column = data.draw(st.sampled_from(CONTRACT), label="column")
    kind = data.draw(st.sampled_from(["text", "float", "bool", "bigint", "datetime"]), label="kind")
    rows = rows_subset(data, len(frame))
    values = frame[column].astype(object)
    if kind == "text":
        values = values.map(str)
        values.iloc[rows] = data.draw(
            st.lists(CSV_TEXT if fmt == "csv" else ANY_TEXT, min_size=len(rows), max_size=len(rows))
        )
    elif kind == "float":
        values = values.astype(float)
        values.iloc[rows] = data.draw(st.lists(st.floats(), min_size=len(rows), max_size=len(rows)))
    elif kind == "bool":
        values = pd.Series(
            data.draw(st.lists(st.booleans(), min_size=len(frame), max_size=len(frame))), dtype=bool
        )
    elif kind == "bigint":
        values = values.astype(np.int64)
        values.iloc[rows] = data.draw(
            st.lists(st.integers(-(2**63), 2**63 - 1), min_size=len(rows), max_size=len(rows))
        )
        values = values.astype(np.int64)
    else:  # Parquet timestamps / ISO text, years 1..9999 (beyond pandas' nanosecond range)
        stamps = data.draw(
            st.lists(
                st.datetimes(timezones=st.just(dt.UTC)), min_size=len(frame), max_size=len(frame)
            )
        )
        values = pd.Series(stamps, dtype=object)
        if fmt == "csv":
            values = values.map(lambda v: v.isoformat())
    path = raw.replace(day, frame.assign(**{column: values.to_numpy()}), fmt)
    return Expect([raw.rel(path)], rows_read=raw.read_rows())


def nulls(data, raw: Raw, day: dt.date) -> Expect:
    fmt, frame = raw.base[day]
    column = data.draw(st.sampled_from(CONTRACT), label="column")
    rows = rows_subset(data, len(frame))
    values = frame[column].astype(object)
    values.iloc[rows] = data.draw(
        st.sampled_from([None, ""]) if column in ("user_id", "item_id") else st.just(None),
        label="null",
    )
    if fmt == "parquet" and (values == "").any():
        values = values.map(lambda v: v if v is None else str(v))  # "" in an id column: text
    path = raw.replace(day, frame.assign(**{column: values}), fmt)
    reason = {
        "user_id": "null_user_id",
        "item_id": "null_item_id",
        "timestamp": "bad_timestamp",
        "label": "bad_label",
    }.get(column)
    return Expect(
        [raw.rel(path)],
        column=column,
        rows_read=raw.read_rows(),
        quarantined={reason: len(rows)} if reason else {},
    )


def labels_out_of_range(data, raw: Raw, day: dt.date) -> Expect:
    fmt, frame = raw.base[day]
    rows = rows_subset(data, len(frame))
    kind = data.draw(st.sampled_from(["int", "float", "text"]), label="kind")
    valid_text = {"0", "1", "0.0", "1.0", "true", "false"}
    bad = {
        "int": st.integers(-(2**63), 2**63 - 1).filter(lambda v: v not in (0, 1)),
        "float": st.floats().filter(lambda v: v not in (0.0, 1.0)),
        "text": (CSV_TEXT if fmt == "csv" else ANY_TEXT).filter(
            lambda s: s.strip().lower() not in valid_text
        ),
    }[kind]
    labels = (
        frame["label"].astype({"int": np.int64, "float": float, "text": str}[kind]).astype(object)
    )
    labels.iloc[rows] = data.draw(st.lists(bad, min_size=len(rows), max_size=len(rows)))
    if kind != "text":
        labels = labels.astype({"int": np.int64, "float": float}[kind])
    path = raw.replace(day, frame.assign(label=labels), fmt)
    return Expect(
        [raw.rel(path)],
        column="label",
        rows_read=raw.read_rows(),
        quarantined={"bad_label": len(rows)},
    )


def timestamps_out_of_range(data, raw: Raw, day: dt.date) -> Expect:
    """Shifted epoch seconds, milliseconds, or far ISO / Parquet times; the count is exact."""
    fmt, frame = raw.base[day]
    rows = rows_subset(data, len(frame))
    kind = data.draw(
        st.sampled_from(["shift", "milliseconds", "iso text", "datetime"]), label="kind"
    )
    seconds = frame["timestamp"].to_numpy().astype(object)
    if kind == "shift":
        seconds[rows] = [int(seconds[r]) + data.draw(st.integers(-(10**11), 10**11)) for r in rows]
        values = pd.Series(seconds.astype(np.int64))
        epoch = values.to_numpy()
    elif kind == "milliseconds":
        seconds[rows] = [int(seconds[r]) * 1000 for r in rows]
        values = pd.Series(seconds.astype(np.int64))
        epoch = values.to_numpy()
    else:
        stamps = [dt.datetime.fromtimestamp(int(s), dt.UTC) for s in seconds]
        for r in rows:
            stamps[r] = data.draw(st.datetimes(timezones=st.just(dt.UTC)), label="time")
        epoch = np.array(
            [
                (s - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(seconds=1)
                for s in stamps
            ]
        )
        values = pd.Series(stamps, dtype=object)
        if kind == "iso text" or fmt == "csv":
            values = values.map(lambda v: v.isoformat())
    window = DayWindow.for_day(schema.epoch_day(day), SKEW / 3600)
    out = int(((epoch < window.min_ts) | (epoch >= window.max_ts)).sum())
    path = raw.replace(day, frame.assign(timestamp=values.to_numpy()), fmt)
    return Expect(
        [raw.rel(path)],
        column="timestamp",
        rows_read=raw.read_rows(),
        quarantined={"timestamp_out_of_range": out} if out else {},
    )


def duplicate_rows(data, raw: Raw, day: dt.date) -> Expect:
    """Exact copies, in the same file or in a second file of the other format, same day."""
    fmt, frame = raw.base[day]
    copies = frame.iloc[data.draw(st.lists(st.integers(0, len(frame) - 1), min_size=1, max_size=8))]
    if data.draw(st.booleans(), label="same file"):
        path = raw.replace(day, pd.concat([frame, copies], ignore_index=True), fmt)
        extra = 0  # the copies are in the day's base frame now
    else:
        path = write_day(
            raw.root, day, copies, "csv" if fmt == "parquet" else "parquet", name="dups"
        )
        extra = len(copies)
    # look-back days keep only clicks: their non-click copies are history-only, not duplicates
    counted = (
        len(copies)
        if day >= CONFIG["end_date"] - dt.timedelta(days=2)
        else int((copies["label"] == 1).sum())
    )
    return Expect(
        [raw.rel(path)],
        rows_read=raw.read_rows(extra=extra),
        quarantined={},
        min_duplicates=counted,
    )


def empty_file(data, raw: Raw, day: dt.date) -> Expect:
    fmt = data.draw(st.sampled_from(["csv", "parquet"]), label="fmt")
    path = raw.root / schema.day_folder_name(day) / f"empty.{fmt}"
    path.write_bytes(b"")
    return Expect([raw.rel(path)], must_fail=True)


def truncated_file(data, raw: Raw, day: dt.date) -> Expect:
    """The day's file cut short, or with a hole: a read error, or fewer rows, never a crash."""
    fmt, frame = raw.base[day]
    content = to_bytes(frame, data.draw(st.sampled_from(["csv", "parquet"]), label="fmt"))
    cut_fmt = "parquet" if content.startswith(b"PAR1") else "csv"
    a = data.draw(st.integers(1, len(content) - 1), label="cut at")
    if data.draw(st.booleans(), label="hole"):
        b = data.draw(st.integers(a, len(content) - 1), label="hole end")
        content = content[:a] + content[b:]
    else:
        content = content[:a]
    raw.base_path(day).unlink()
    path = raw.root / schema.day_folder_name(day) / f"part-00000.{cut_fmt}"
    path.write_bytes(content)
    raw.base[day] = (cut_fmt, frame)
    return Expect([raw.rel(path)])


def odd_encoding(data, raw: Raw, day: dt.date) -> Expect:
    """A CSV in latin-1, UTF-16, UTF-8 with a BOM, with CR or CRLF line ends, or with invalid
    UTF-8 bytes in one field."""
    _, frame = raw.base[day]
    kind = data.draw(
        st.sampled_from(["latin-1", "utf-16", "utf-8-sig", "\r", "\r\n", "invalid bytes"]),
        label="encoding",
    )
    if kind in ("latin-1", "utf-16", "utf-8-sig"):
        frame = frame.assign(user_id="é" + frame["user_id"].astype(str))
        content = frame.to_csv(index=False).encode(kind)
    elif kind in ("\r", "\r\n"):
        content = frame.to_csv(index=False, lineterminator=kind).encode()
    else:
        column = data.draw(st.sampled_from(list(frame.columns) + ["extra"]), label="column")
        frame = frame.assign(extra="e").astype(str)
        row = data.draw(st.integers(0, len(frame) - 1), label="row")
        junk = data.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe9t\xe9"]))
        marker = "@@JUNK@@"
        frame.loc[row, column] = marker + frame.loc[row, column]
        content = frame.to_csv(index=False).encode().replace(marker.encode(), junk)
    raw.base_path(day).unlink()
    path = raw.root / schema.day_folder_name(day) / "part-00000.csv"
    path.write_bytes(content)
    raw.base[day] = ("csv", frame)
    if kind in ("utf-8-sig", "\r", "\r\n"):
        return Expect([raw.rel(path)], rows_read=raw.read_rows(), quarantined={})
    if kind == "invalid bytes" and column == "extra":  # a column the stage never reads
        return Expect([raw.rel(path)], rows_read=raw.read_rows(), quarantined={})
    return Expect(
        [raw.rel(path)],
        must_fail=True,
        column=None if kind == "utf-16" else ("user_id" if kind == "latin-1" else column),
    )


def very_long_ids(data, raw: Raw, day: dt.date) -> Expect:
    fmt, frame = raw.base[day]
    column = data.draw(st.sampled_from(["user_id", "item_id", "category_id"]), label="column")
    char = data.draw(st.sampled_from(["x", "é", "7", "語"]), label="char")
    rows = rows_subset(data, len(frame))
    values = frame[column].astype(str).astype(object)
    values.iloc[rows] = [char * 10_000 + str(r) for r in rows]
    path = raw.replace(day, frame.assign(**{column: values}), fmt)
    return Expect([raw.rel(path)], rows_read=raw.read_rows(), quarantined={})


def mixed_formats_and_id_types(data, raw: Raw, day: dt.date) -> Expect:
    """One day as a CSV with text ids ("u_3", "007", "42") and a Parquet with integer ids."""
    _, frame = raw.base[day]
    split = data.draw(st.integers(0, len(frame)), label="split")
    text = frame.iloc[:split].copy()
    styles = data.draw(
        st.lists(
            st.sampled_from(["plain", "prefixed", "zero-padded"]),
            min_size=len(text),
            max_size=len(text),
        ),
        label="id styles",
    )
    text["user_id"] = [
        {"plain": str(v), "prefixed": f"u_{v}", "zero-padded": f"00{v}"}[s]
        for v, s in zip(text["user_id"], styles, strict=True)
    ]
    raw.base_path(day).unlink()
    paths = [
        write_day(raw.root, day, text, "csv", name="a"),
        write_day(raw.root, day, frame.iloc[split:], "parquet", name="b"),
    ]
    raw.base[day] = ("parquet", frame.iloc[split:])
    return Expect([raw.rel(p) for p in paths], rows_read=raw.read_rows(extra=split), quarantined={})


def nested_column(data, raw: Raw, day: dt.date) -> Expect:
    _, frame = raw.base[day]
    column = data.draw(st.sampled_from(CONTRACT), label="column")
    kind = data.draw(st.sampled_from(["list", "struct", "map"]), label="kind")
    n = len(frame)
    nested = {
        "list": pa.array([[1, 2]] * n),
        "struct": pa.array([{"a": 1}] * n),
        "map": pa.array([[("k", 1)]] * n, pa.map_(pa.string(), pa.int64())),
    }[kind]
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.set_column(table.schema.get_field_index(column), column, nested)
    raw.base_path(day).unlink()
    path = raw.root / schema.day_folder_name(day) / "part-00000.parquet"
    pq.write_table(table, path)
    raw.base[day] = ("parquet", frame)
    return Expect([raw.rel(path)], column=column, must_fail=True)


def duplicate_column(data, raw: Raw, day: dt.date) -> Expect:
    _, frame = raw.base[day]
    column = data.draw(st.sampled_from(CONTRACT), label="column")
    fmt = data.draw(st.sampled_from(["csv", "parquet"]), label="fmt")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.append_column(column, table.column(column))  # pandas cannot write this one
    raw.base_path(day).unlink()
    path = raw.root / schema.day_folder_name(day) / f"part-00000.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        pd.concat([frame, frame[[column]]], axis=1).to_csv(path, index=False)
    raw.base[day] = (fmt, frame)
    return Expect([raw.rel(path)], column=column, must_fail=True)


def junk_file(data, raw: Raw, day: dt.date) -> Expect:
    fmt = data.draw(st.sampled_from(["csv", "parquet"]), label="fmt")
    path = raw.root / schema.day_folder_name(day) / f"junk.{fmt}"
    path.write_bytes(data.draw(st.binary(min_size=1, max_size=300), label="bytes"))
    return Expect([raw.rel(path)], must_fail=True)


def damage_outside_the_window(data, raw: Raw, day: dt.date) -> Expect:
    """Junk in a day before the look-back, in a non-day folder, and in ignored names: unread."""
    junk = data.draw(st.binary(max_size=100), label="bytes")
    (raw.root / schema.day_folder_name(OUTSIDE) / "junk.parquet").write_bytes(junk)
    (raw.root / "dt=2026-13-45").mkdir()
    (raw.root / "dt=2026-13-45" / "junk.csv").write_bytes(junk)
    folder = raw.root / schema.day_folder_name(day)
    for name in ("_SUCCESS", ".hidden.parquet", "_tmp.csv", "notes.txt"):
        (folder / name).write_bytes(junk)
    return Expect([], rows_read=raw.read_rows(), quarantined={})


FAULTS: dict[str, Callable[..., Expect]] = {
    "missing required column": missing_required_column,
    "missing optional / extra columns": optional_missing_and_extra_columns,
    "wrong value types": wrong_types,
    "nulls and empty ids": nulls,
    "labels out of range": labels_out_of_range,
    "timestamps out of range (shift, ms, far ISO/Parquet times)": timestamps_out_of_range,
    "duplicate rows": duplicate_rows,
    "empty (0-byte) file": empty_file,
    "truncated CSV/Parquet bytes": truncated_file,
    "latin-1 / UTF-16 / BOM / CR line ends / invalid UTF-8 CSV": odd_encoding,
    "10k-character ids": very_long_ids,
    "mixed CSV+Parquet, string+integer ids in one day": mixed_formats_and_id_types,
    "nested (list/struct/map) column": nested_column,
    "duplicate column name": duplicate_column,
    "random bytes as a raw file": junk_file,
    "junk outside the window / ignored names": damage_outside_the_window,
}


# -- the invariant ------------------------------------------------------------------------


def build_raw(root: Path, seed: int, formats: list[str]) -> Raw:
    rng = np.random.default_rng(seed)
    raw = Raw(root)
    for day, fmt in zip(DAYS, formats, strict=True):
        frame = random_events(rng, day, ROWS)
        write_day(root, day, frame, fmt)
        raw.base[day] = (fmt, frame)
    return raw


def outcome_of(raw: Raw, expect: Expect, out: Path, max_quarantine: float) -> str:
    """Run the stage and check the invariant; returns a short description of what happened."""
    config = PreprocessConfig(
        raw=str(raw.root), out=str(out), max_quarantine_fraction=max_quarantine, **CONFIG
    )
    try:
        meta = preprocess(config)
    except InputError as exc:
        return check_error(str(exc), raw, expect)
    assert not expect.must_fail, f"expected an InputError, got a dataset: {meta.rows}"
    return check_accounting(meta, raw, expect, out)


def check_error(message: str, raw: Raw, expect: Expect) -> str:
    assert "\n" not in message, f"not one line: {message!r}"
    named = [f for f in expect.files if f in message]
    whole_split = (
        re.search(
            r"split .* has no usable rows|every row in the window was quarantined"
            r"|split .* has \d+ rows and (no|only) clicks",  # what is left of a damaged day may be too little
            message,
        )
        and str(raw.root) in message
    )
    assert named or whole_split, (
        f"names neither a damaged file {expect.files} nor the split: {message}"
    )
    about_a_column = re.search(r"\bcolumn\b", message, re.IGNORECASE)
    if about_a_column:
        assert any(f"'{c}'" in message for c in CONTRACT), (
            f"a column error naming no column: {message}"
        )
    if (
        expect.column
        and named
        and "failed validation" not in message
        and (expect.must_fail or about_a_column)
    ):
        assert f"'{expect.column}'" in message, f"does not name column {expect.column!r}: {message}"
    if "failed validation" in message:
        if expect.column:
            assert f"column '{expect.column}'" in message, message
        return "InputError: too much quarantined, names file, row and column"
    if whole_split:
        return "InputError: a split left empty, names the split"
    return "InputError naming file" + (" and column" if about_a_column else "")


def check_accounting(meta: DatasetMeta, raw: Raw, expect: Expect, out: Path) -> str:
    rows = meta.rows
    kept = sum(rows["kept"].values())
    assert rows["read"] == kept + rows["quarantined_total"] + rows["duplicates_dropped"], rows
    assert rows["quarantined_total"] == sum(rows["quarantined"].values()), rows
    assert set(rows["quarantined"]) <= set(DOCUMENTED_REASONS), rows["quarantined"]
    if expect.rows_read is not None:
        assert rows["read"] == expect.rows_read, (rows, expect)
    if expect.quarantined is not None:
        assert rows["quarantined"] == {k: v for k, v in expect.quarantined.items() if v}, rows
    assert rows["duplicates_dropped"] >= expect.min_duplicates, (rows, expect)
    for split, info in meta.splits.items():
        assert info.rows == rows["kept"][split] > 0, (split, rows)
    quarantine_dir = out / "quarantine"
    files = sorted(quarantine_dir.glob("*.parquet")) if quarantine_dir.is_dir() else []
    table = (
        pd.concat([pd.read_parquet(f) for f in files])
        if files
        else pd.DataFrame(columns=["file", "reason", "column"])
    )
    assert len(table) == rows["quarantined_total"]
    for reason, column in table[["reason", "column"]].drop_duplicates().itertuples(index=False):
        assert DOCUMENTED_REASONS.get(reason) == column, (reason, column)
    assert set(table["file"]) <= set(expect.files), "a row of an undamaged file was quarantined"
    if rows["quarantined_total"]:
        return "dataset; rows read = kept + quarantined + duplicates; documented reasons"
    if rows["duplicates_dropped"]:
        return "dataset; duplicates dropped and counted; books balance"
    return "dataset; every row kept; books balance"


@pytest.mark.integration
@pytest.mark.parametrize("fault", list(FAULTS))
def test_preprocess_on_bad_input_fails_clearly_or_keeps_exact_books(fault, tmp_path, fault_report):
    seen: Counter[str] = Counter()

    @SETTINGS
    @given(
        data=st.data(),
        seed=st.integers(0, 2**16),
        formats=st.lists(st.sampled_from(["parquet", "csv"]), min_size=5, max_size=5),
        day=st.sampled_from(READ_DAYS),
        max_quarantine=st.sampled_from([0.1, 1.0]),
    )
    def check(data, seed, formats, day, max_quarantine):
        folder = Path(tempfile.mkdtemp(dir=tmp_path))
        try:
            raw = build_raw(folder / "raw", seed, formats)
            expect = FAULTS[fault](data, raw, day)
            seen[outcome_of(raw, expect, folder / "ds", max_quarantine)] += 1
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    check()
    fault_report(CATEGORY, fault, "; ".join(f"{what} ({n}x)" for what, n in sorted(seen.items())))


# -- focused regressions for the bugs this test found --------------------------------------


def test_far_iso_and_parquet_times_are_quarantined_not_a_crash(fault_report):
    """Was OutOfBoundsDatetime: seconds went through a nanosecond cast (years 1677..2262 only)."""
    text = pd.Series(["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-03-01T00:00:01Z"])
    seconds, valid = parse_timestamps(text)
    assert valid.all()
    assert seconds.tolist() == [253402300799, -62135596800, schema.day_start_epoch(START) + 1]
    far = pa.array(
        [dt.datetime(9999, 1, 1), dt.datetime(1, 1, 1, 0, 0, 1, 500_000)], pa.timestamp("us")
    )
    seconds, valid = parse_timestamps(pa.table({"t": far}).to_pandas()["t"])
    assert valid.all() and seconds.tolist() == [253370764800, -62135596799]
    fault_report(
        CATEGORY,
        "timestamp year 9999 / year 1 (ISO text, Parquet timestamp[us])",
        "quarantined timestamp_out_of_range (was OutOfBoundsDatetime)",
    )


def _raw_file(path: Path) -> rawio.RawFile:
    return rawio.RawFile(
        index=0,
        path=str(path),
        relpath=f"dt=2026-03-01/{path.name}",
        day=START,
        fmt=path.suffix[1:],
        size=path.stat().st_size,
    )


def _plan(path: Path) -> None:
    import fsspec

    rawio.plan_pieces(fsspec.filesystem("file"), [_raw_file(path)])


def test_nested_and_duplicate_columns_are_named_at_scan(tmp_path, fault_report):
    """Was a TypeError (unhashable list) or "missing required column 'user_id' (has: element, ...)"."""
    base = pa.table({"user_id": [1], "item_id": [2], "timestamp": [3], "label": [0]})
    nested = base.set_column(0, "user_id", pa.array([[1, 2]]))
    pq.write_table(nested, tmp_path / "nested.parquet")
    with pytest.raises(
        InputError,
        match=r"'dt=2026-03-01/nested\.parquet': column 'user_id' has nested "
        r"type list",
    ):
        _plan(tmp_path / "nested.parquet")
    category = base.append_column(
        "category_id", pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))
    )
    pq.write_table(category, tmp_path / "category.parquet")
    with pytest.raises(
        InputError, match=r"category\.parquet': column 'category_id' has nested type map"
    ):
        _plan(tmp_path / "category.parquet")
    pq.write_table(base.append_column("label", base.column("label")), tmp_path / "twice.parquet")
    with pytest.raises(InputError, match=r"twice\.parquet': column 'label' appears 2 times"):
        _plan(tmp_path / "twice.parquet")
    (tmp_path / "twice.csv").write_text("user_id,item_id,timestamp,label,label\n1,2,3,0,1\n")
    with pytest.raises(InputError, match=r"twice\.csv': column 'label' appears 2 times"):
        _plan(tmp_path / "twice.csv")
    fault_report(
        CATEGORY,
        "nested column; a contract column twice (Parquet, CSV)",
        "InputError naming file and column at scan (was TypeError / AttributeError)",
    )


def test_csv_header_blanks_and_quoted_commas_read_as_checked(tmp_path, fault_report):
    """The header check stripped blanks but the reader did not: "Column 'user_id' ... does not exist"."""
    path = tmp_path / "spaced.csv"
    path.write_text(' user_id , item_id ,"a,b",timestamp,label\n1,2,x,3,0\n')
    file = _raw_file(path)
    import fsspec

    fs = fsspec.filesystem("file")
    assert rawio.read_csv_header(fs, file) == ["user_id", "item_id", "a,b", "timestamp", "label"]
    (piece,) = rawio.plan_pieces(fs, [file])
    table = rawio.read_piece(fs, piece)
    assert table.column_names == ["user_id", "item_id", "timestamp", "label"]
    assert table.to_pylist() == [{"user_id": "1", "item_id": "2", "timestamp": "3", "label": "0"}]
    fault_report(
        CATEGORY,
        "CSV header with blanks around names, a quoted comma in a name",
        "read as the header check reads it (was InputError 'column does not exist')",
    )


def test_invalid_utf8_in_a_csv_field_names_the_column(tmp_path, fault_report):
    """Arrow says "In CSV column #2" (a position): the message now names the column too."""
    path = tmp_path / "latin.csv"
    path.write_bytes(b"extra,user_id,item_id,timestamp,label\nx,u1,i1,3,0\nx,u2,caf\xe9,3,0\n")
    import fsspec

    fs = fsspec.filesystem("file")
    (piece,) = rawio.plan_pieces(fs, [_raw_file(path)])
    with pytest.raises(
        InputError,
        match=r"'dt=2026-03-01/latin\.csv': unreadable CSV data .*invalid "
        r"UTF8.*column 'item_id'",
    ):
        rawio.read_piece(fs, piece)
    fault_report(
        CATEGORY,
        "invalid UTF-8 byte in one CSV field",
        "InputError naming file and column (was: column #2)",
    )


def test_arrow_errors_spanning_lines_become_one_line(tmp_path, fault_report):
    """Was a three-line InputError: thrift's "...\\nDeserializing page header failed.\\n"."""
    buffer = io.BytesIO()
    pq.write_table(
        pa.table({"user_id": [1, 2], "item_id": [2, 3], "timestamp": [3, 4], "label": [0, 1]}),
        buffer,
    )
    damaged = bytearray(buffer.getvalue())
    damaged[4:30] = b"\xff" * 26  # the first page header: the footer still reads
    path = tmp_path / "paged.parquet"
    path.write_bytes(bytes(damaged))
    import fsspec

    fs = fsspec.filesystem("file")
    (piece,) = rawio.plan_pieces(fs, [_raw_file(path)])
    with pytest.raises(
        InputError, match=r"^'dt=2026-03-01/paged\.parquet': unreadable PARQUET data \("
    ) as caught:
        rawio.read_piece(fs, piece)
    message = str(caught.value)
    assert message.startswith("'dt=2026-03-01/paged.parquet': unreadable PARQUET data (")
    assert "\n" not in message and message.isprintable(), repr(message)
    fault_report(
        CATEGORY,
        "Parquet with a damaged page header (footer intact)",
        "InputError naming the file, one printable line (was three lines)",
    )


def test_csv_with_cr_line_ends_reads_its_header_line_only(tmp_path, fault_report):
    """A lone CR ends a line for Arrow: the header check now cuts there too (it took the whole
    file as the header line and reported 'label' missing, listing every value)."""
    path = tmp_path / "mac.csv"
    path.write_bytes(b"user_id,item_id,timestamp,label\r1,2,3,0\r4,5,6,1\r")
    import fsspec

    fs = fsspec.filesystem("file")
    assert rawio.read_csv_header(fs, _raw_file(path)) == [
        "user_id",
        "item_id",
        "timestamp",
        "label",
    ]
    (piece,) = rawio.plan_pieces(fs, [_raw_file(path)])
    assert rawio.read_piece(fs, piece).num_rows == 2
    fault_report(CATEGORY, "CSV with CR-only line ends", "read like any CSV")
