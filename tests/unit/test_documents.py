"""The documents stages hand each other (``components/common/document.py``): each one's section in
docs/data.md lists exactly its fields, and the decision, the newest, reads back what was written
and refuses what it cannot use in one line naming the file and the field."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from components.common.document import Document
from components.common.evaluation import Decision, DecisionError, Metrics
from components.common.registration import Registration
from components.common.run_record import RunRecord
from components.common.train_summary import TrainSummary
from tests.tools import ROOT

DOCUMENTS = (RunRecord, TrainSummary, Metrics, Decision, Registration)


def documented_block(kind: type[Document]) -> str:
    """The field list (the first code block) of the docs/data.md section whose heading names the
    document's file."""
    text = (ROOT / "docs" / "data.md").read_text()
    heading = re.search(rf"^## .*{re.escape(kind.FILE)}.*$", text, re.M)
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


DECISION = Decision(
    blessed=False,
    reasons=("served AUC 0.7000 >= min_auc 0.5500", "AUC vs champion v3: -0.0100 ..."),
    rule={"min_auc": 0.55, "tolerance": 0.002},
    detectable_effect=0.012,
    model_name="dailyrec",
    champion_version=3,
    champion_status="scored",
    comparison={"delta": -0.01, "ci_low": -0.02, "ci_high": -0.005, "users": 400},
)


def test_a_decision_reads_back_as_written(tmp_path):
    path = DECISION.write(tmp_path)
    assert path == tmp_path / "decision.json"
    again = Decision.read(tmp_path)
    assert again == DECISION and again.reasons == DECISION.reasons and again.source == path
    assert json.loads(path.read_text())["format"] == "dailyrec.decision/v1"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.update(format="dailyrec.decision/v9"), "format is 'dailyrec.decision/v9'"),
        (lambda d: d.pop("format"), "format is None"),
        (lambda d: d.pop("rule"), "no 'rule' field"),
        (lambda d: d.pop("blessed"), "no 'blessed' field"),
    ],
)
def test_a_decision_it_cannot_use_is_refused_naming_the_file(tmp_path, change, says):
    doc = DECISION.to_document()
    change(doc)
    (tmp_path / "decision.json").write_text(json.dumps(doc))
    with pytest.raises(DecisionError) as caught:
        Decision.read(tmp_path)
    message = str(caught.value)
    assert says in message and str(tmp_path / "decision.json") in message and "\n" not in message


def test_a_missing_decision_says_evaluate_did_not_finish(tmp_path):
    with pytest.raises(DecisionError, match="no decision \\(evaluate did not finish\\)"):
        Decision.read(tmp_path)
    assert Decision.find(tmp_path) is None
