"""The scoring protocol keeps every value as sent and refuses what it does not know."""

from __future__ import annotations

import io
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.score.protocol import (
    CSV,
    JSON,
    MAX_BYTES,
    PARAMS,
    PARQUET,
    ProtocolError,
    check_params,
    parse_body,
)

BIG = 2**62 + 1  # not exact as a float64
ROWS = [
    {"user_id": 7, "item_id": BIG, "category_id": BIG, "timestamp": 1767258000},
    {"user_id": "u-8", "item_id": 3, "category_id": None, "timestamp": "2026-01-01T10:00:00"},
]
DEFAULT = {name: p.default for name, p in PARAMS.items()}


def _json(doc) -> bytes:
    return json.dumps(doc).encode()


def _values(frame: pd.DataFrame) -> list[dict]:
    return [{c: frame[c].iloc[i] for c in frame.columns} for i in range(len(frame))]


@pytest.mark.parametrize(
    "doc",
    [
        {"dataframe_records": ROWS},
        {"dataframe_split": {"columns": list(ROWS[0]), "data": [list(r.values()) for r in ROWS]}},
        {"inputs": {c: [r[c] for r in ROWS] for c in ROWS[0]}},
        {"inputs": ROWS},
        {"instances": ROWS},
    ],
    ids=["records", "split", "inputs-columns", "inputs-records", "instances"],
)
def test_every_json_format_gives_the_values_as_sent(doc):
    frame, params = parse_body(_json(doc), JSON)
    assert params == DEFAULT
    assert _values(frame) == ROWS
    # an int64 beside a null stays an exact int, not a float64
    assert frame["category_id"].iloc[0] == BIG and type(frame["category_id"].iloc[0]) is int
    assert frame["category_id"].iloc[1] is None


def test_records_missing_a_field_get_null_there():
    frame, _ = parse_body(_json({"dataframe_records": [{"user_id": 1}, {"item_id": 2}]}), JSON)
    assert _values(frame) == [{"user_id": 1, "item_id": None}, {"user_id": None, "item_id": 2}]


def test_params_are_checked_and_defaulted():
    _, params = parse_body(_json({"dataframe_records": ROWS, "params": {"batch_size": 64}}), JSON)
    assert params == {"batch_size": 64}
    assert check_params({}) == DEFAULT


@pytest.mark.parametrize(
    "body, content_type, status, reason",
    [
        (_json({"dataframe_records": ROWS, "extra": 1}), JSON, 400, "unknown field.*'extra'"),
        (
            _json({"dataframe_records": ROWS, "params": {"batchsize": 1}}),
            JSON,
            400,
            "unknown param.*'batchsize'",
        ),
        (
            _json({"dataframe_records": ROWS, "params": {"batch_size": 0}}),
            JSON,
            400,
            r"batch_size must be an integer in 1\.\.65536, got 0",
        ),
        (_json({"dataframe_records": ROWS, "params": {"batch_size": True}}), JSON, 400, "got True"),
        (_json({"dataframe_records": ROWS, "params": [1]}), JSON, 400, "params must be an object"),
        (_json({"dataframe_records": ROWS, "instances": ROWS}), JSON, 400, "exactly one of"),
        (_json({}), JSON, 400, "got none"),
        (_json([1, 2]), JSON, 400, "got a list"),
        (_json({"dataframe_records": [1]}), JSON, 400, r"dataframe_records\[0\] must be an object"),
        (
            _json({"dataframe_records": {"a": 1}}),
            JSON,
            400,
            "must be a list of records, got a dict",
        ),
        (
            _json({"dataframe_split": {"columns": ["a"], "data": [[1, 2]]}}),
            JSON,
            400,
            r"data\[0\] must be a list of 1 values",
        ),
        (
            _json({"dataframe_split": {"columns": ["a", "a"], "data": []}}),
            JSON,
            400,
            "names a column twice",
        ),
        (_json({"inputs": {"a": [1], "b": [1, 2]}}), JSON, 400, "different lengths"),
        (b'{"dataframe_records": [{"user_id": NaN}]}', JSON, 400, "NaN is not a JSON value"),
        (b'{"dataframe_records": [', JSON, 400, "not JSON: .* line 1 column"),
        (b"\xff\xfe", JSON, 400, "not utf-8"),
        (b"a,b\n1,2\n", "text/plain", 415, "content type 'text/plain'"),
        (b"a\n1\n", "text/csv; charset=latin-1", 415, "utf-8 only"),
        (b"x" * (MAX_BYTES + 1), JSON, 413, "at most"),
        (b"", CSV, 400, "CSV body is empty"),
        (
            b"user_id,events_item_id\n1,not-a-list\n",
            CSV,
            400,
            "row 0: events_item_id must be a JSON list",
        ),
        (b"not parquet", PARQUET, 400, "Parquet body cannot be read"),
    ],
)
def test_bad_bodies_are_refused_in_one_line(body, content_type, status, reason):
    with pytest.raises(ProtocolError, match=reason) as caught:
        parse_body(body, content_type)
    assert caught.value.status == status
    assert "\n" not in str(caught.value) and "Traceback" not in str(caught.value)


def test_csv_keeps_text_and_reads_event_lists_from_their_cells():
    body = (
        "user_id,item_id,category_id,timestamp,events_item_id,events_label\n"
        f'7,{BIG},,1767258000,"[1, {BIG}]","[1, 0]"\n'
        "u-8,3,c,2026-01-01T10:00:00,,\n"
    ).encode()
    frame, params = parse_body(body, "text/csv; charset=utf-8")
    assert params == DEFAULT
    assert _values(frame) == [
        {
            "user_id": "7",
            "item_id": str(BIG),
            "category_id": None,
            "timestamp": "1767258000",
            "events_item_id": [1, BIG],
            "events_label": [1, 0],
        },
        {
            "user_id": "u-8",
            "item_id": "3",
            "category_id": "c",
            "timestamp": "2026-01-01T10:00:00",
            "events_item_id": None,
            "events_label": None,
        },
    ]


def test_parquet_keeps_int64_beside_null():
    table = pa.table({"user_id": pa.array([BIG, None], pa.int64()), "item_id": ["a", "b"]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    frame, _ = parse_body(sink.getvalue(), PARQUET)
    assert _values(frame) == [{"user_id": BIG, "item_id": "a"}, {"user_id": None, "item_id": "b"}]
