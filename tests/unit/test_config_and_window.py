import datetime as dt

import pytest

from components.common import schema
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import Window

END = dt.date(2026, 3, 20)


def config(**overrides):
    return PreprocessConfig(**({"raw": "raw", "out": "out"} | overrides))


def test_window_assigns_days_to_splits():
    window = Window(END, config(days=5, history_days=2, val_days=1, test_days=2))
    assert window.first_read == dt.date(2026, 3, 14)
    assert window.start == dt.date(2026, 3, 16)
    assert [window.split_of(dt.date(2026, 3, d)) for d in range(14, 22)] == [
        None,
        None,
        "train",
        "train",
        "val",
        "test",
        "test",
        None,
    ]
    assert window.split_range("train") == "2026-03-16 .. 2026-03-17"
    assert window.split_range("test") == "2026-03-19 .. 2026-03-20"
    assert window.day_numbers() == {
        "train": schema.epoch_day(dt.date(2026, 3, 16)),
        "val": schema.epoch_day(dt.date(2026, 3, 18)),
        "test": schema.epoch_day(dt.date(2026, 3, 19)),
    }


def test_missing_days_are_listed():
    window = Window(END, config(days=3, history_days=1))
    present = {dt.date(2026, 3, 17): "", dt.date(2026, 3, 20): ""}
    assert window.missing_days(present) == [dt.date(2026, 3, 18), dt.date(2026, 3, 19)]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"days": 2}, "must exceed val_days"),
        ({"seq_len": 0}, "seq_len must be >= 1"),
        ({"history_days": -1}, "history_days must be >= 0"),
        ({"item_buckets": 1}, "item_buckets must be in"),
        ({"max_quarantine_fraction": 1.5}, "max_quarantine_fraction"),
        ({"scheduler": "gpu"}, "scheduler must be one of"),
        ({"workers": 0}, "workers must be >= 1"),
        ({"raw": ""}, "raw: the raw events location"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        config(**overrides)


def test_config_accepts_scheduler_addresses_and_iso_dates():
    assert config(scheduler="tcp://dask-scheduler:8786").scheduler.startswith("tcp://")
    assert config(end_date="2026-03-20").end_date == END


def test_fingerprint_fields_ignore_how_not_what():
    a = config(scheduler="processes", workers=2, force=True).result_fields()
    assert a == config().result_fields()
    assert config(seq_len=7).result_fields() != a


def test_day_folder_helpers_read_misnamed_dates_and_file_kinds():
    from components.common import schema

    assert schema.parse_day_folder("dt=2026-1-5") is None
    assert schema.loose_day_numbers("dt=2026-1-5") == (2026, 1, 5)
    assert schema.loose_day_numbers("dt=20260105") == (2026, 1, 5)
    assert schema.loose_day_numbers("dt=2026-13-45") == (2026, 13, 45)
    assert schema.loose_day_numbers("dt=latest") is None
    assert schema.raw_format("part-0.snappy.parquet") == ("parquet", None)
    assert schema.raw_format("events.CSV.GZ") == ("csv", "gzip")
    assert schema.raw_format("events.csv.zst") == ("csv", "zstd")
    assert schema.raw_format("x.pq") == ("parquet", None)
    assert schema.raw_format("events.csv.snappy") is None and schema.raw_format("notes.txt") is None
