"""The dataset's meta.json as one typed document: read what preprocess wrote, refuse what it did
not, write what the readers accept."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from components.common.dataset import SCHEMA_VERSION, SPLITS, DatasetError
from components.common.dataset_meta import META_FILE, DatasetMeta, SplitInfo, Window
from components.train.model import Vocab
from tests.meta_docs import meta_document


def test_a_preprocessed_dataset_reads_typed_and_writes_back_as_it_was(tiny_dataset, tmp_path):
    written = json.loads((tiny_dataset / META_FILE).read_text())
    meta = DatasetMeta.read(tiny_dataset)
    assert meta.source == tiny_dataset / META_FILE
    assert meta.fingerprint == written["fingerprint"] and meta.seq_len == written["seq_len"]
    for split in SPLITS:
        info, raw = meta.split(split), written["splits"][split]
        assert (info.rows, info.positives, info.days) == (
            raw["rows"],
            raw["positives"],
            raw["days"],
        )
        labels = np.load(tiny_dataset / split / "label.npy")
        assert info.label_counts == (int(labels.sum()), len(labels) - int(labels.sum()))
        first, _, last = raw["days"].partition(" .. ")
        assert info.day_list[0] == first and info.day_list[-1] == (last or first)
    assert meta.window == Window(**written["window"])
    # a row's bytes: what the .npy files of a split hold per row
    arrays = {p.stem: np.load(p, mmap_mode="r") for p in (tiny_dataset / "test").glob("*.npy")}
    assert meta.row_bytes == sum(a.itemsize * int(np.prod(a.shape[1:])) for a in arrays.values())
    # nothing lost or changed on the way through the type
    assert meta.to_document() == written
    meta.write(tmp_path)
    assert json.loads((tmp_path / META_FILE).read_text()) == written
    assert Vocab.from_meta(written) == Vocab.from_meta(meta)


@pytest.mark.parametrize(
    "change, names",
    [
        (
            lambda d: d.update(schema_version=SCHEMA_VERSION + 1),
            "schema_version 3 is not supported",
        ),
        (lambda d: d.update(seq_len=0), "field seq_len must be an integer >= 1"),
        (lambda d: d.pop("arrays"), "field arrays is missing"),
        (lambda d: d["arrays"].pop("label"), "field arrays.label is missing"),
        (lambda d: d["splits"]["val"].pop("rows"), "field splits.val.rows is missing"),
        (lambda d: d["splits"]["val"].update(rows=-1), "field splits.val.rows is missing"),
        (lambda d: d["splits"]["test"].update(positives=-2), "field splits.test: positives -2"),
        (lambda d: d["splits"]["test"].update(positive_rate=1.5), "positive_rate 1.5"),
        (lambda d: d.update(window={"end": "2026-01-05"}), "field window needs start and end"),
        (lambda d: d.update(buckets=[64]), "field buckets is not an object"),
        (lambda d: d.update(files=[]), "field files is not an object"),
    ],
)
def test_a_document_it_cannot_read_is_refused_naming_the_file_and_field(change, names, tmp_path):
    doc = meta_document()
    change(doc)
    (tmp_path / META_FILE).write_text(json.dumps(doc))
    with pytest.raises(DatasetError) as raised:
        DatasetMeta.read(tmp_path, splits=())
    assert str(tmp_path / META_FILE) in str(raised.value) and names in str(raised.value)


def test_a_split_asked_for_must_be_recorded_and_present(tmp_path):
    (tmp_path / META_FILE).write_text(json.dumps(meta_document(rows={"train": 10})))
    meta = DatasetMeta.read(tmp_path, splits=())
    assert set(meta.splits) == {"train"}
    with pytest.raises(DatasetError, match=r"meta.json: field splits.val.rows is missing"):
        meta.split("val")
    with pytest.raises(DatasetError, match=r"train: split folder missing \(meta.json lists 10"):
        DatasetMeta.read(tmp_path, splits=("train",))


def test_a_split_without_both_labels_is_named_with_its_counts():
    doc = meta_document(rows={"train": 10, "val": 3, "test": 4})
    doc["splits"]["val"].update(positives=0, positive_rate=0.0)
    meta = DatasetMeta.from_document(doc, "/d/meta.json")
    meta.require_both_labels("train", "training")
    with pytest.raises(DatasetError, match=r"/d/meta.json: the val split has 3 rows and 0 clicks"):
        meta.require_both_labels("val", "validation AUC")


def test_label_counts_and_days_of_a_hand_made_split():
    assert SplitInfo(rows=1_000, positive_rate=0.08).label_counts == (80, 920)
    assert SplitInfo(rows=1_000, positives=7, positive_rate=0.5).label_counts == (7, 993)
    assert SplitInfo(rows=5, days="2026-02-27 .. 2026-03-01").day_list == (
        "2026-02-27",
        "2026-02-28",
        "2026-03-01",
    )
    assert SplitInfo(rows=5, days="2026-03-01").day_list == ("2026-03-01",)
    assert SplitInfo(rows=5).day_list == ()


def test_fields_no_reader_models_travel_with_the_document():
    doc = meta_document(benchmark_subset={"rows": {"train": 5}})
    meta = DatasetMeta.from_document(copy.deepcopy(doc))
    assert meta.document["benchmark_subset"] == {"rows": {"train": 5}}
    assert meta.to_document() == doc
