"""The preprocess cache cannot serve the wrong dataset: fingerprints see every edit, folders are per key,
and a dataset is used only when its meta.json says it is the one the pointer was made for."""

from __future__ import annotations

import json
import os

import fsspec
import numpy as np
import pytest

from components.common.dataset import (
    SCHEMA_VERSION,
    DatasetMismatch,
    check_fingerprint,
    read_pointer,
    record_files,
    verify_files,
)
from components.common.dataset_meta import DatasetMeta, SplitInfo, write_pointer
from components.common.runs import dataset_dir
from components.preprocess import raw as rawio
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import resolve_inputs

CSV = "user_id,item_id,timestamp,label\n" + "".join(
    f"u{i},i{i},{1767225600 + i},0\n" for i in range(120_000)
)
"""About 3.4 MB: more than the first and last MiB a sampling fingerprint would read."""


def edit_middle(data: str) -> str:
    """The same text with one label in the middle flipped: same size, first and last MiB unchanged."""
    middle = len(data) // 2
    at = data.index(",0\n", middle)
    return data[:at] + ",1\n" + data[at + 3 :]


def test_a_same_size_edit_in_the_middle_of_a_local_file_changes_its_fingerprint(tmp_path):
    path = tmp_path / "dt=2026-01-01" / "events.csv"
    path.parent.mkdir()
    path.write_text(CSV)
    assert path.stat().st_size > 3 * 2**20
    fs = fsspec.filesystem("file")
    file = rawio.RawFile(0, str(path), "dt=2026-01-01/events.csv", None, "csv", path.stat().st_size)
    before = rawio.file_fingerprint(fs, file)
    assert rawio.file_fingerprint(fs, file) == before  # nothing changed: same key
    stat = path.stat()
    path.write_text(edit_middle(CSV))
    assert path.stat().st_size == stat.st_size
    assert rawio.file_fingerprint(fs, file) != before
    # a local file is vouched for by its modification time: restoring it (what a same-second edit
    # on a coarse clock would look like) is the documented limit
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert rawio.file_fingerprint(fs, file) == before


def test_without_a_checksum_the_whole_content_is_hashed():
    fs = fsspec.filesystem("memory")
    fs.pipe("/raw/dt=2026-01-01/e.csv", CSV.encode())
    token = rawio.content_token(fs, "/raw/dt=2026-01-01/e.csv")
    assert token.startswith("sha256=")
    fs.pipe("/raw/dt=2026-01-01/e.csv", edit_middle(CSV).encode())
    assert rawio.content_token(fs, "/raw/dt=2026-01-01/e.csv") != token


class ObjectStore:
    """What s3fs's info gives: an ETag; opening the object would cost a download and is refused."""

    def __init__(self, etag):
        self.etag = etag

    def info(self, path):
        return {"name": path, "size": 10, "type": "file", "ETag": self.etag}

    def open(self, path, mode="rb"):
        raise AssertionError("the content was read although the store vouches for it")


def test_an_object_store_is_vouched_for_by_its_checksum_without_reading():
    assert rawio.content_token(ObjectStore('"abc"'), "b/k") == 'info:ETag="abc"'
    assert rawio.content_token(ObjectStore('"abd"'), "b/k") != rawio.content_token(
        ObjectStore('"abc"'), "b/k"
    )


def test_each_configuration_of_one_window_gets_its_own_folder(raw_days, tmp_path):
    raw, _ = raw_days(days=6, rows=50)
    folders = set()
    for overrides in ({}, {"days": 3}, {"history_days": 2}, {"seq_len": 5}):
        found = resolve_inputs(
            PreprocessConfig(raw=str(raw), out=str(tmp_path), **({"days": 4} | overrides))
        )
        folder = dataset_dir(tmp_path, found.window.end.isoformat(), found.fingerprint)
        assert folder.name == f"{found.window.end.isoformat()}-{found.fingerprint[:12]}"
        folders.add(folder)
    assert len(folders) == 4


def test_a_dataset_is_used_only_when_its_meta_json_is_the_expected_one(tmp_path):
    good, other = "a" * 64, "b" * 64
    folder = tmp_path / "datasets" / f"2026-01-05-{good[:12]}"
    folder.mkdir(parents=True)
    (folder / "train").mkdir()
    (folder / "train" / "label.npy").write_bytes(b"\x00\x01\x00\x00\x01")
    meta = {
        "fingerprint": good,
        "splits": {s: {"rows": n} for s, n in (("train", 5), ("val", 2), ("test", 1))},
        "files": record_files(folder),
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    pointer = tmp_path / "dataset.json"
    typed = DatasetMeta(
        schema_version=SCHEMA_VERSION,
        seq_len=1,
        neg_len=1,
        arrays={},
        splits={s: SplitInfo(rows=info["rows"]) for s, info in meta["splits"].items()},
        fingerprint=good,
    )
    metadata = write_pointer(pointer, typed, str(folder))
    assert metadata == {
        "uri": str(folder),
        "fingerprint": good,
        "train_rows": 5,
        "val_rows": 2,
        "test_rows": 1,
    }
    assert read_pointer(pointer) == str(folder)
    # the folder rebuilt for another key since the pointer was cached: refused, not used
    (folder / "meta.json").write_text(json.dumps({**meta, "fingerprint": other}))
    with pytest.raises(
        DatasetMismatch,
        match=r"meta.json fingerprint bbbbbbbbbbbb is not the expected aaaaaaaaaaaa",
    ):
        read_pointer(pointer)
    (folder / "meta.json").unlink()
    with pytest.raises(DatasetMismatch, match="no meta.json: the dataset folder is gone"):
        check_fingerprint(folder, good)
    pointer.write_text("{}")
    with pytest.raises(DatasetMismatch, match="not a dataset pointer"):
        read_pointer(pointer)


def test_a_dataset_changed_after_it_was_written_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "d"
    (folder / "train").mkdir(parents=True)
    labels = folder / "train" / "label.npy"
    np.save(labels, np.array([0, 1, 0, 0, 1], np.uint8))
    (folder / "count_state.npz").write_bytes(b"state")
    meta = {"fingerprint": "a" * 64, "files": record_files(folder)}
    assert set(meta["files"]) == {"train/label.npy", "count_state.npz"}
    (folder / "meta.json").write_text(json.dumps(meta))
    assert check_fingerprint(folder, "a" * 64) == meta
    original = labels.read_bytes()
    np.save(labels, 1 - np.load(labels))  # every label flipped: same size, other bytes
    with pytest.raises(DatasetMismatch, match=r"train/label.npy: its content is not what"):
        check_fingerprint(folder, "a" * 64)
    labels.write_bytes(original + b"\x00")
    with pytest.raises(DatasetMismatch, match=r"label.npy: \d+ bytes, preprocess wrote"):
        verify_files(folder, meta)
    labels.write_bytes(original)
    verify_files(folder, meta)
    (folder / "train" / "extra.npy").write_bytes(b"x")
    with pytest.raises(DatasetMismatch, match="extra.npy: a file preprocess did not write"):
        verify_files(folder, meta)
    (folder / "train" / "extra.npy").unlink()
    labels.unlink()
    with pytest.raises(DatasetMismatch, match="label.npy: missing from the dataset"):
        verify_files(folder, meta)
    with pytest.raises(DatasetMismatch, match="records no file digests"):
        verify_files(folder, {"fingerprint": "a" * 64})
