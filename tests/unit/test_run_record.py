"""The run record (runs/<run id>/run.json): one reader and writer, a format, clear errors."""

from __future__ import annotations

import dataclasses
import json

import pytest

from components.common.run_record import (
    RUN_RECORD,
    RUN_RECORD_FORMAT,
    RunRecord,
    RunRecordError,
)
from tests.run_records import run_record


def test_a_record_reads_back_as_written_with_its_format(tmp_path):
    path = run_record(tmp_path, "r7", "/data/d", files=12, seq_len=30)
    doc = json.loads(path.read_text())
    assert path.name == RUN_RECORD and doc["format"] == RUN_RECORD_FORMAT
    record = RunRecord.read(tmp_path)
    assert (record.run_id, record.data_dir, record.files, record.seq_len) == (
        "r7",
        "/data/d",
        12,
        30,
    )
    assert set(doc) == {"format", *(f.name for f in dataclasses.fields(RunRecord))}


def test_a_record_written_before_the_format_field_reads_as_the_first_version(tmp_path):
    doc = json.loads(run_record(tmp_path).read_text())
    del doc["format"]
    (tmp_path / RUN_RECORD).write_text(json.dumps(doc))
    assert RunRecord.read(tmp_path) == RunRecord.from_document(doc)


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d.update(format="dailyrec.run-record/v9"), "format is 'dailyrec.run-record/v9'"),
        (lambda d: d.pop("data_dir"), "no 'data_dir' field"),
        (lambda d: d.update(window_days="11"), 'window_days "11": expected int'),
        (lambda d: d.update(files=True), "files true: expected int"),
        (lambda d: d.update(raw_uri=None), "raw_uri null: expected str"),
    ],
)
def test_a_record_it_cannot_read_is_refused_in_one_line_naming_the_file(tmp_path, change, says):
    doc = json.loads(run_record(tmp_path).read_text())
    change(doc)
    (tmp_path / RUN_RECORD).write_text(json.dumps(doc))
    with pytest.raises(RunRecordError) as caught:
        RunRecord.read(tmp_path)
    message = str(caught.value)
    assert says in message and str(tmp_path / RUN_RECORD) in message and "\n" not in message
    assert RunRecord.find(tmp_path) is None


def test_an_absent_or_broken_record_says_so(tmp_path):
    with pytest.raises(RunRecordError, match="no run record"):
        RunRecord.read(tmp_path)
    (tmp_path / RUN_RECORD).write_text("{not json")
    with pytest.raises(RunRecordError, match="unreadable"):
        RunRecord.read(tmp_path)
    (tmp_path / RUN_RECORD).write_text("[]")
    with pytest.raises(RunRecordError, match="not a JSON object"):
        RunRecord.read(tmp_path)
