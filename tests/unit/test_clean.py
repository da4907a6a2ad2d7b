import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from components.common import schema
from components.preprocess.clean import (
    DayWindow,
    clean_table,
    parse_labels,
    parse_timestamps,
)

DAY = dt.date(2026, 3, 1)
T0 = schema.day_start_epoch(DAY)
WINDOW = DayWindow.for_day(schema.epoch_day(DAY), max_skew_hours=3)


def test_timestamps_from_epoch_numbers_iso_text_and_datetimes():
    text = pd.Series(
        [
            str(T0),
            f"{T0}.7",
            "2026-03-01T10:00:00Z",
            "2026-03-01 10:00:00",
            "2026-03-01T12:00:00+02:00",
            "yesterday",
            None,
        ],
        dtype=object,
    )
    seconds, valid = parse_timestamps(text)
    assert valid.tolist() == [True, True, True, True, True, False, False]
    assert seconds[:5].tolist() == [T0, T0, T0 + 36_000, T0 + 36_000, T0 + 36_000]
    seconds, valid = parse_timestamps(pd.Series([T0, T0 + 1.9, np.nan]))
    assert seconds[:2].tolist() == [T0, T0 + 1] and valid.tolist() == [True, True, False]
    stamps = pd.Series(pd.to_datetime([T0 + 5, None], unit="s"))
    seconds, valid = parse_timestamps(stamps)
    assert seconds[0] == T0 + 5 and valid.tolist() == [True, False]


def test_labels_accept_numbers_booleans_and_text_only_zero_or_one():
    values, valid = parse_labels(
        pd.Series(["1", "0", " TRUE ", "false", "2", "", None, "1.0"], dtype=object)
    )
    assert valid.tolist() == [True, True, True, True, False, False, False, True]
    assert values[valid].tolist() == [1, 0, 1, 0, 1]
    values, valid = parse_labels(pd.Series([0, 1, 2, -1, 0.5]))
    assert valid.tolist() == [True, True, False, False, False]
    values, valid = parse_labels(pd.Series([True, False]))
    assert values.tolist() == [1, 0] and valid.all()


@pytest.mark.parametrize(
    ("column", "bad_value", "reason"),
    [
        ("user_id", None, "null_user_id"),
        ("user_id", "", "null_user_id"),
        ("item_id", None, "null_item_id"),
        ("timestamp", "not a time", "bad_timestamp"),
        ("timestamp", None, "bad_timestamp"),
        ("timestamp", str(T0 - 4 * 3600), "timestamp_out_of_range"),
        ("timestamp", str(T0 + 86_400 + 4 * 3600), "timestamp_out_of_range"),
        ("timestamp", str(T0 * 1000), "timestamp_out_of_range"),  # milliseconds, not seconds
        ("label", "2", "bad_label"),
        ("label", None, "bad_label"),
    ],
)
def test_each_bad_value_is_quarantined_with_its_reason(column, bad_value, reason):
    rows = {
        "user_id": ["u1", "u2", "u3"],
        "item_id": ["i1", "i2", "i3"],
        "category_id": ["c1", None, "c3"],
        "timestamp": [str(T0 + 60)] * 3,
        "label": ["0", "1", "0"],
    }
    rows[column][1] = bad_value
    table = pa.table({k: pa.array(v, pa.string()) for k, v in rows.items()})
    clean, quarantine, counts = clean_table(table, file_index=3, row_offset=100, window=WINDOW)
    assert counts[reason] == 1 and sum(counts.values()) == 1
    assert len(clean) == 2 and clean["user_key"].nunique() == 2
    assert quarantine[["file", "row", "reason", "column"]].values.tolist() == [
        [3, 101, reason, column]
    ]
    # the original value is kept as text for inspection
    assert quarantine[column].iloc[0] == bad_value or (
        bad_value == "" and quarantine[column].iloc[0] == ""
    )


def test_skew_tolerance_accepts_late_events():
    table = pa.table(
        {
            "user_id": [1, 2],
            "item_id": [1, 2],
            "timestamp": [T0 - 2 * 3600, T0 + 86_400 + 3599],
            "label": [0, 1],
        }
    )
    clean, quarantine, _ = clean_table(table, 0, 0, WINDOW)
    assert len(clean) == 2 and len(quarantine) == 0


def test_missing_category_becomes_key_zero_not_quarantine():
    table = pa.table(
        {
            "user_id": [1, 2],
            "item_id": [1, 2],
            "category_id": pa.array([5, None], pa.int64()),
            "timestamp": [T0, T0],
            "label": [0, 1],
        }
    )
    clean, quarantine, _ = clean_table(table, 0, 0, WINDOW)
    assert len(quarantine) == 0
    assert clean["cat_key"].iloc[0] != 0 and clean["cat_key"].iloc[1] == 0


def test_first_failing_check_wins_so_each_row_counts_once():
    table = pa.table(
        {
            "user_id": pa.array([None], pa.string()),
            "item_id": pa.array([None], pa.string()),
            "timestamp": ["garbage"],
            "label": ["7"],
        }
    )
    clean, quarantine, counts = clean_table(table, 0, 0, WINDOW)
    assert len(clean) == 0 and sum(counts.values()) == 1 and counts["null_user_id"] == 1


def test_timestamps_read_through_arrow_types_without_a_float_detour():
    big = 2**62  # beyond 2**53: a float64 detour would round it
    seconds, valid = parse_timestamps(pa.array([T0, None, big, -5], pa.int64()))
    assert seconds.tolist() == [T0, 0, 0, -5] and valid.tolist() == [True, False, False, True]
    seconds, valid = parse_timestamps(pa.array([T0, 2**64 - 1], pa.uint64()))
    assert seconds.tolist() == [T0, 0] and valid.tolist() == [True, False]
    stamps = pa.array([(T0 * 1000 + 1999) * 1000, None], pa.timestamp("us", tz="Asia/Tokyo"))
    seconds, valid = parse_timestamps(stamps)
    assert seconds.tolist() == [T0 + 1, 0] and valid.tolist() == [True, False]
    seconds, valid = parse_timestamps(
        pa.array([-1500], pa.timestamp("ms"))
    )  # floored, not truncated
    assert seconds.tolist() == [-2]
    seconds, valid = parse_timestamps(
        pa.array([str(T0), "2026-03-01T01:00:00Z"]).dictionary_encode()
    )
    assert seconds.tolist() == [T0, T0 + 3600] and valid.all()


def test_iso_dates_without_a_time_of_day_are_invalid():
    seconds, valid = parse_timestamps(
        pa.array(
            ["2026-03-01", "2026-03-01T00:00:00Z", " 2026-03-01 00:00 ", "2026-03-01 00:00:00 UTC"]
        )
    )
    assert (
        valid.tolist() == [False, True, True, True] and seconds[1] == seconds[2] == seconds[3] == T0
    )


def test_labels_accept_decimal_numbers_and_text():
    import decimal

    values, valid = parse_labels(
        pa.array(
            [decimal.Decimal("1.00"), decimal.Decimal("0.00"), decimal.Decimal("0.50"), None],
            pa.decimal128(3, 2),
        )
    )
    assert valid.tolist() == [True, True, False, False] and values[:2].tolist() == [1, 0]
    values, valid = parse_labels(pa.array(["1.00", "0.000", "1e0", "2.00", "TRUE"]))
    assert valid.tolist() == [True, True, True, False, True] and values[valid].tolist() == [
        1,
        0,
        1,
        1,
    ]


@pytest.mark.parametrize(
    ("column", "type_", "refused"),
    [
        ("timestamp", pa.float32(), True),
        ("timestamp", pa.date32(), True),
        ("timestamp", pa.bool_(), True),
        ("timestamp", pa.float64(), False),
        ("timestamp", pa.timestamp("ns", "UTC"), False),
        ("timestamp", pa.dictionary(pa.int32(), pa.string()), False),
        ("user_id", pa.timestamp("s"), True),
        ("user_id", pa.list_(pa.int64()), True),
        ("user_id", pa.uint64(), False),
        ("user_id", pa.decimal128(38, 0), False),
        ("user_id", pa.binary(), False),
        ("label", pa.date32(), True),
        ("label", pa.decimal128(3, 2), False),
    ],
)
def test_column_types_that_would_lose_values_are_refused(column, type_, refused):
    from components.preprocess.clean import column_type_problem

    assert (column_type_problem(column, type_) is not None) == refused


def test_bad_ids_are_quarantined_with_their_own_reason():
    table = pa.table(
        {
            "user_id": pa.array([1.0, 1.5, float("nan"), 2.0**60]),
            "item_id": pa.array([1, 2, 3, 4]),
            "category_id": pa.array([1.0, 2.0, 3.5, None]),
            "timestamp": [T0] * 4,
            "label": [0, 1, 0, 1],
        }
    )
    clean, quarantine, counts = clean_table(table, 0, 0, WINDOW)
    assert quarantine[["row", "reason", "column"]].values.tolist() == [
        [1, "bad_user_id", "user_id"],
        [2, "null_user_id", "user_id"],
        [3, "bad_user_id", "user_id"],
    ]
    assert len(clean) == 1
    table = table.set_column(0, "user_id", pa.array([1, 2, 3, 4]))
    _, quarantine, _ = clean_table(table, 0, 0, WINDOW)
    assert quarantine[["row", "reason", "column", "category_id"]].values.tolist() == [
        [2, "bad_category_id", "category_id", "3.5"]
    ]


# ----------------------------------------------------------------------------- exact contracts


def test_day_window_bounds_are_exact():
    day = schema.epoch_day(DAY)
    assert DayWindow.for_day(day, 2.0) == DayWindow(day, T0 - 7_200, T0 + 86_400 + 7_200)
    assert DayWindow.for_day(day, 0.0) == DayWindow(day, T0, T0 + 86_400)
    # hours become whole seconds, rounded: 1/3600 h is 1 s, 0.4 s rounds away
    assert DayWindow.for_day(3, 1 / 3600) == DayWindow(3, 3 * 86_400 - 1, 4 * 86_400 + 1)
    assert DayWindow.for_day(3, 0.4 / 3600) == DayWindow(3, 3 * 86_400, 4 * 86_400)


def test_window_edges_min_inclusive_max_exclusive():
    window = DayWindow.for_day(schema.epoch_day(DAY), 0.0)
    ts = [window.min_ts - 1, window.min_ts, window.max_ts - 1, window.max_ts]
    table = pa.table(
        {"user_id": [1, 2, 3, 4], "item_id": [5, 6, 7, 8], "timestamp": ts, "label": [0, 1, 0, 1]}
    )
    clean, quarantine, counts = clean_table(table, 0, 0, window)
    assert clean["ts"].tolist() == [window.min_ts, window.max_ts - 1]
    assert quarantine["row"].tolist() == [0, 3] and set(quarantine["reason"]) == {
        "timestamp_out_of_range"
    }
    assert counts["timestamp_out_of_range"] == 2


def test_timestamp_types_and_invalid_values_exactly():
    seconds, valid = parse_timestamps(pd.Series([True, False]))
    assert (seconds.dtype, seconds.tolist(), valid.dtype, valid.tolist()) == (
        np.int64,
        [0, 0],
        np.bool_,
        [False, False],
    )
    seconds, valid = parse_timestamps(
        pd.Series([1.7, -1.5, np.inf, 1e17, -1e17, 99_999_999_999_999_984.0, np.nan])
    )
    assert seconds.dtype == np.int64 and valid.dtype == np.bool_
    assert valid.tolist() == [True, True, False, False, False, True, False]
    assert seconds.tolist() == [1, -2, 0, 0, 0, 99_999_999_999_999_984, 0]  # floor; 0 where invalid
    seconds, valid = parse_timestamps(pd.Series([T0, None], dtype="Int64"))
    assert seconds.tolist() == [T0, 0] and valid.tolist() == [True, False]
    seconds, valid = parse_timestamps(pd.Series(["nonsense", "1e18", str(T0)], dtype=object))
    assert seconds.tolist() == [0, 0, T0] and valid.tolist() == [False, False, True]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_datetimes_in_every_unit_give_whole_epoch_seconds(unit):
    values = np.array(["2026-03-01T10:00:00.750", "NaT"], dtype=f"datetime64[{unit}]")
    seconds, valid = parse_timestamps(pd.Series(values))
    assert (seconds.dtype, seconds.tolist(), valid.tolist()) == (
        np.int64,
        [T0 + 36_000, 0],
        [True, False],
    )
    aware = pd.Series(values).dt.tz_localize("Europe/Paris")  # 10:00 in Paris is 09:00 UTC
    seconds, valid = parse_timestamps(aware)
    assert (seconds.dtype, seconds.tolist(), valid.tolist()) == (
        np.int64,
        [T0 + 32_400, 0],
        [True, False],
    )


def test_far_datetimes_do_not_overflow():
    seconds, valid = parse_timestamps(
        pd.Series(["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"], dtype=object)
    )
    assert seconds.tolist() == [253_402_300_799, -62_135_596_800] and valid.tolist() == [True, True]


def test_label_types_and_invalid_values_exactly():
    values, valid = parse_labels(pd.Series([True, False, None], dtype="boolean"))
    assert (values.dtype, values.tolist(), valid.tolist()) == (
        np.int8,
        [1, 0, 0],
        [True, True, False],
    )
    values, valid = parse_labels(pd.Series([0, 1, 2, 0.5, np.nan, -1, -0.0]))
    assert (values.dtype, values.tolist()) == (np.int8, [0, 1, 0, 0, 0, 0, 0])
    assert valid.tolist() == [True, True, False, False, False, False, True]
    values, valid = parse_labels(pd.Series([1, None, 0], dtype="Int64"))
    assert (values.dtype, values.tolist(), valid.tolist()) == (
        np.int8,
        [1, 0, 0],
        [True, False, True],
    )
    values, valid = parse_labels(
        pd.Series([" 1 ", "TRUE", "false", "0.0", "yes", None, ""], dtype=object)
    )
    assert (values.dtype, values.tolist()) == (np.int8, [1, 1, 0, 0, 0, 0, 0])
    assert valid.tolist() == [True, True, True, True, False, False, False]


def test_clean_and_quarantine_frames_have_the_contract_columns_and_types():
    table = pa.table(
        {
            "user_id": ["u1", None, "u3"],
            "item_id": ["i1", "i2", "i3"],
            "timestamp": [T0 + 10, T0 + 20, T0 + 30],
            "label": [1, 0, 7],
        }
    )
    clean, quarantine, counts = clean_table(table, 4, 1000, WINDOW)
    assert {c: str(t) for c, t in clean.dtypes.items()} == {
        "user_key": "int64",
        "item_key": "int64",
        "cat_key": "int64",
        "ts": "int64",
        "label": "int8",
        "day": "int32",
    }
    assert clean.to_dict("list") | {"user_key": None, "item_key": None} == {
        "user_key": None,
        "item_key": None,
        "cat_key": [0],
        "ts": [T0 + 10],
        "label": [1],
        "day": [WINDOW.day_number],
    }
    assert clean["user_key"].tolist() != [0] and clean["item_key"].tolist() != [0]
    assert list(quarantine.columns) == [
        "file",
        "row",
        "reason",
        "column",
        "user_id",
        "item_id",
        "category_id",
        "timestamp",
        "label",
    ]
    assert (str(quarantine["file"].dtype), str(quarantine["row"].dtype)) == ("int32", "int64")
    records = [
        {k: None if v is None or v != v else v for k, v in r.items()}  # NaN and None: null
        for r in quarantine.to_dict("records")
    ]
    assert records == [
        {
            "file": 4,
            "row": 1001,
            "reason": "null_user_id",
            "column": "user_id",
            "user_id": None,
            "item_id": "i2",
            "category_id": None,
            "timestamp": str(T0 + 20),
            "label": "0",
        },
        {
            "file": 4,
            "row": 1002,
            "reason": "bad_label",
            "column": "label",
            "user_id": "u3",
            "item_id": "i3",
            "category_id": None,
            "timestamp": str(T0 + 30),
            "label": "7",
        },
    ]
    assert counts == {
        "null_user_id": 1,
        "null_item_id": 0,
        "bad_user_id": 0,
        "bad_item_id": 0,
        "bad_category_id": 0,
        "bad_timestamp": 0,
        "timestamp_out_of_range": 0,
        "bad_label": 1,
    }


def test_labels_beyond_float_precision_are_bad_labels_not_a_crash():
    labels, valid = parse_labels(pa.array([1, 0, 2**53 + 1, -(2**62)], pa.int64()))
    assert labels.tolist() == [1, 0, 0, 0] and valid.tolist() == [True, True, False, False]


# ---------------------------------------------------------------------------- Arrow types, exactly


@pytest.mark.parametrize(
    "type_", [pa.large_string(), pa.string_view(), pa.dictionary(pa.int8(), pa.string())]
)
def test_every_text_type_is_read_as_text(type_):
    """Large strings and string views (Arrow's other text layouts) parse like plain strings."""
    stamps = pa.array([" 2026-03-01T10:00:00Z ", f"{T0}", "later", None]).cast(type_)
    seconds, valid = parse_timestamps(stamps)
    assert valid.tolist() == [True, True, False, False] and seconds.tolist() == [
        T0 + 36_000,
        T0,
        0,
        0,
    ]
    labels, valid = parse_labels(pa.array([" True", "0", "yes", None]).cast(type_))
    assert valid.tolist() == [True, True, False, False] and labels.tolist() == [1, 0, 0, 0]
    assert labels.dtype == np.int8


def test_an_empty_chunked_column_gives_empty_results():
    for values in (pa.chunked_array([], pa.int64()), pa.chunked_array([], pa.string())):
        seconds, valid = parse_timestamps(values)
        assert (seconds.tolist(), valid.tolist()) == ([], []) and seconds.dtype == np.int64
        labels, valid = parse_labels(values)
        assert (labels.tolist(), valid.tolist()) == ([], []) and labels.dtype == np.int8


def test_integer_seconds_are_exact_beyond_float_precision_even_with_nulls():
    """2**53 + 1 has no float64: integer epoch seconds never pass through floats."""
    for values in (pa.array([2**53 + 1, None], pa.int64()), pa.array([2**53 + 1], pa.int64())):
        seconds, valid = parse_timestamps(values)
        assert seconds[0] == 2**53 + 1 and valid[0]
        assert seconds.dtype == np.int64


def test_integer_seconds_limit_is_exclusive():
    # 10**17 - 16: the largest integer below the limit that float64 tells apart from it
    seconds, valid = parse_timestamps(pa.array([10**17 - 16, 10**17, -(10**17)], pa.int64()))
    assert valid.tolist() == [True, False, False] and seconds.tolist() == [10**17 - 16, 0, 0]


def test_unsigned_seconds_keep_their_nulls_and_refuse_what_int64_cannot_hold():
    seconds, valid = parse_timestamps(pa.array([T0, None, 2**64 - 1, 0], pa.uint64()))
    assert valid.tolist() == [True, False, False, True] and seconds.tolist() == [T0, 0, 0, 0]


def test_nanosecond_timestamps_floor_to_the_second_exactly_with_nulls():
    """One nanosecond before the next second is still this second (an int64 division, never a
    float one: float64 cannot tell x.999999999 s from x+1 s at today's epoch)."""
    ns = (T0 + 1) * 10**9 - 1
    seconds, valid = parse_timestamps(pa.array([ns, None], pa.timestamp("ns")))
    assert seconds.tolist() == [T0, 0] and valid.tolist() == [True, False]
    seconds, valid = parse_timestamps(pa.array([f"{DAY.isoformat()}T00:00:00.999999999Z"]))
    assert valid.tolist() == [True] and seconds.tolist() == [T0]
    seconds, valid = parse_timestamps(pa.array(["9999-12-31T23:59:59.999999Z"]))  # microseconds
    assert valid.tolist() == [True] and seconds.tolist() == [253402300799]


def test_labels_of_a_type_without_labels_are_all_invalid():
    for values in (pa.nulls(3), pa.array([T0, T0, T0], pa.timestamp("s"))):
        labels, valid = parse_labels(values)
        assert labels.tolist() == [0, 0, 0] and labels.dtype == np.int8
        assert valid.tolist() == [False, False, False] and valid.dtype == bool


@pytest.mark.parametrize(
    "type_",
    [
        pa.string(),
        pa.large_string(),
        pa.null(),
        pa.int64(),
        pa.int8(),
        pa.uint32(),
        pa.float64(),
        pa.decimal128(10, 3),
        pa.timestamp("ms"),
    ],
)
def test_timestamp_column_types_that_hold_times(type_):
    from components.preprocess.clean import column_type_problem

    assert column_type_problem("timestamp", type_) is None


@pytest.mark.parametrize(
    "type_",
    [
        pa.bool_(),
        pa.int64(),
        pa.uint8(),
        pa.float32(),
        pa.float64(),
        pa.decimal128(3, 2),
        pa.string(),
        pa.large_string(),
        pa.null(),
        pa.dictionary(pa.int32(), pa.string()),
    ],
)
def test_label_column_types_that_hold_labels(type_):
    from components.preprocess.clean import column_type_problem

    assert column_type_problem("label", type_) is None


def test_refused_column_types_say_why_and_what_to_write():
    from components.preprocess.clean import column_type_problem

    assert column_type_problem("timestamp", pa.date32()) == (
        "has date-only type date32[day]: every row would be midnight and same-day events would merge "
        "as duplicates; write a timestamp, epoch seconds or ISO-8601 text"
    )
    # a dictionary of dates is refused for its values
    assert column_type_problem("timestamp", pa.dictionary(pa.int16(), pa.date64())).startswith(
        "has date-only type date64[ms]: "
    )
    assert column_type_problem("timestamp", pa.float16()) == (
        "has type halffloat: today's epoch seconds do not fit it exactly (float32 rounds them to "
        "128-second steps); write int64 or float64 seconds, or a timestamp"
    )
    assert column_type_problem("timestamp", pa.binary()) == (
        "has type binary; expected a timestamp, epoch seconds (integer or float64) or ISO-8601 text"
    )
    assert column_type_problem("label", pa.binary()) == (
        "has type binary; expected 0/1 numbers, booleans or the text 0/1/true/false"
    )
    assert column_type_problem("label", pa.list_(pa.int8())) == (
        "has nested type list<item: int8>; expected strings, numbers, booleans or timestamps"
    )
    assert column_type_problem("event_type", pa.binary()) is None  # not a contract column


def test_quarantined_values_are_text_or_none_in_object_columns():
    """Any input type fits the quarantine: values as their text, missing as None (not NaN), and
    a contract column the file lacks (category) is None on every row."""
    table = pa.table(
        {
            "user_id": pa.array(["u1", None, "u3"]),
            "item_id": pa.array([7, 8, 9]),
            "timestamp": pa.array([T0 + 5, T0, T0 + 1]),
            "label": pa.array([1, 1, 5]),
        }
    )
    clean, quarantine, counts = clean_table(table, 4, 100, WINDOW)
    assert len(clean) == 1 and counts["null_user_id"] == 1 and counts["bad_label"] == 1
    assert quarantine["row"].tolist() == [101, 102]
    assert quarantine["user_id"].tolist() == [None, "u3"] and quarantine["item_id"].tolist() == [
        "8",
        "9",
    ]
    assert quarantine["label"].tolist() == ["1", "5"] and quarantine["category_id"].tolist() == [
        None,
        None,
    ]
    for column in schema.CONTRACT_COLUMNS:
        assert quarantine[column].dtype == object, column
