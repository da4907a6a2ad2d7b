"""The documents stages hand each other (``components/common/document.py``): each one's section in
docs/data.md lists exactly its fields, each reads back what was written, and each refuses what it
cannot use in one line naming the file and the field."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from components.common.document import Document
from components.common.evaluation import Decision, Metrics
from components.common.registration import Registration
from components.common.run_record import RunRecord
from components.common.run_summary import RunSummary
from components.common.train_summary import TrainSummary
from tests.tools import ROOT

DOCUMENTS = (RunRecord, TrainSummary, Metrics, Decision, Registration, RunSummary)


def documented_block(kind: type[Document]) -> str:
    """The field list (the first code block) of the docs/data.md section whose heading names the
    document's file."""
    text = (ROOT / "docs" / "data.md").read_text()
    # the file name whole: summary.json's section is not train_summary.json's
    heading = re.search(rf"^## .*\W{re.escape(kind.FILE)}\W.*$", text, re.M)
    assert heading, f"docs/data.md has no section for {kind.FILE}"
    block = re.search(r"^```\n(.*?)^```$", text[heading.end() :], re.M | re.S)
    assert block, f"docs/data.md's {kind.FILE} section has no field list"
    return block.group(1)


@pytest.mark.parametrize("kind", DOCUMENTS, ids=lambda k: k.__name__)
def test_each_documents_section_lists_exactly_its_fields(kind):
    block = documented_block(kind)
    fields = {f.name for f in dataclasses.fields(kind)} - {"source"} | {"format"}
    listed = set(re.findall(r"^(\w+)\s", block, re.M))
    assert listed <= fields, f"{kind.FILE}: documented but not a field: {sorted(listed - fields)}"
    unnamed = {f for f in fields if not re.search(rf"\b{f}\b", block)}
    assert not unnamed, f"{kind.FILE}: fields docs/data.md does not describe: {sorted(unnamed)}"
    assert kind.FORMAT in block


@pytest.mark.parametrize("kind", DOCUMENTS, ids=lambda k: k.__name__)
def test_each_documents_required_fields_are_marked_so(kind):
    block = documented_block(kind)
    lines = dict(re.findall(r"^(\w+)\s+(.*(?:\n\s+.*)*)", block, re.M))
    if kind is RunRecord:  # every field is required: the section says so once
        assert set(kind.REQUIRED) == {f.name for f in dataclasses.fields(kind)}
        return
    for name in kind.REQUIRED:
        assert "(required" in lines.get(name, ""), f"{kind.FILE}: {name} not marked required"


SAMPLES = {
    RunRecord: RunRecord(
        run_id="r1", raw_uri="data/raw", data_dir="datasets/2026-01-05-ab", end_date="2026-01-05",
        run_date="", schedule_time="", window_days=3, history_days=1, seq_len=8,
        input_fingerprint="abc", files=5,
    ),
    TrainSummary: TrainSummary(
        epochs_run=2, best_val_auc=0.73, rows_trained=1000, seconds=1.5, world_size=1,
        history=({"epoch": 0, "val_auc": 0.7}, {"epoch": 1, "val_auc": 0.73}),
    ),
    Metrics: Metrics(
        model_name="dailyrec", test_auc=0.7, test_gauc=0.6, test_logloss=0.3, test_ece=0.01,
        served={"auc": 0.69}, champion={"status": "none"}, dataset={"path": "datasets/x"},
    ),
    Decision: Decision(
        blessed=False,
        reasons=("served AUC 0.7000 >= min_auc 0.5500", "AUC vs champion v3: -0.0100 ..."),
        rule={"min_auc": 0.55, "tolerance": 0.002}, detectable_effect=0.012,
        champion_version=3, champion_status="scored",
        comparison={"delta": -0.01, "ci_low": -0.02, "ci_high": -0.005, "users": 400},
    ),
    Registration: Registration(
        "dailyrec", "0" * 64, True, registered=True, version=2, aliases=("champion",)
    ),
    RunSummary: RunSummary(
        run_id="r1", status="FAILED", error="boom", failed_stage="train",
        dataset_rows={"train": 10, "val": 3, "test": 4}, decision_reasons=("x", "y"),
        stage_seconds={"preprocess": 1.5, "estimate": 0.2, "train": None}, total_seconds=1.7,
        cleanup={"state": "done", "errors": []},
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", DOCUMENTS, ids=lambda k: k.__name__)
def test_a_document_reads_back_as_written(tmp_path, kind):
    written = SAMPLES[kind]
    path = written.write(tmp_path)
    assert path == tmp_path / kind.FILE
    assert json.loads(path.read_text())["format"] == kind.FORMAT
    again = kind.read(tmp_path)
    assert again == written and kind.read(path) == written  # the folder or the file itself
    assert getattr(again, "source", path) == path


def refusals(kind: type[Document]):
    """Each way a document can be unusable, and the words that say so."""
    yield lambda d: d.update(format=kind.FORMAT[:-1] + "9"), f"format is '{kind.FORMAT[:-1]}9'"
    if not kind.UNVERSIONED_IS_FIRST:
        yield lambda d: d.pop("format"), "format is None"
    for name in kind.REQUIRED:
        yield (lambda n: lambda d: d.pop(n))(name), f"no '{name}' field"


@pytest.mark.parametrize("kind", DOCUMENTS, ids=lambda k: k.__name__)
def test_a_document_it_cannot_use_is_refused_in_one_line_naming_the_file(tmp_path, kind):
    path = tmp_path / kind.FILE
    for change, says in refusals(kind):
        doc = SAMPLES[kind].to_document()
        change(doc)
        path.write_text(json.dumps(doc))
        with pytest.raises(kind.Error) as caught:
            kind.read(tmp_path)
        message = str(caught.value)
        assert says in message and str(path) in message and "\n" not in message, message
    for text, says in (("[1, 2]", "not a JSON object"), ("{", "unreadable")):
        path.write_text(text)
        with pytest.raises(kind.Error, match=says):
            kind.read(path)
    with pytest.raises(kind.Error, match=re.escape(f"no {kind.WHAT} ({kind.ABSENT})")):
        kind.read(tmp_path / "elsewhere")
    assert kind.find(tmp_path / "elsewhere") is None and kind.find(path) is None
