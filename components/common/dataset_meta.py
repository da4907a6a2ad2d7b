"""A dataset's ``meta.json``: what preprocess records about a dataset folder and every later stage
reads, as one typed document.

:class:`DatasetMeta` is its one reader (:meth:`DatasetMeta.read`, :meth:`DatasetMeta.from_document`)
and writer (:meth:`DatasetMeta.write`). Its format version is ``schema_version``
(:data:`components.common.dataset.SCHEMA_VERSION`), the version of the Dataset contract as a whole:
a document of another version, or one that lacks a field the contract needs, is refused with a
:class:`DatasetError` naming the file and the field. Readers use attributes; fields that only
preprocess's own summary reads (the row accounting, the inputs, the phase timings) stay mappings,
and :attr:`DatasetMeta.document` keeps the whole document as written. docs/data.md describes every
field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.dataset import FILES_KEY, SCHEMA_VERSION, SPLITS, DatasetError, array_specs
from components.common.storage import atomic_write_json

META_FILE = "meta.json"


@dataclass(frozen=True)
class ArraySpec:
    """One per-split array: its dtype and the shape of one row."""

    dtype: str
    row_shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        import numpy as np

        return int(np.dtype(self.dtype).itemsize * math.prod(self.row_shape))


@dataclass(frozen=True)
class SplitInfo:
    """One split: its rows, its clicks and the UTC days it covers."""

    rows: int
    positive_rate: float = 0.0
    positives: int | None = None
    """Clicks counted by preprocess (None in a document that does not record them)."""
    days: str = ""
    """``"first .. last"`` (ISO dates); empty when not recorded."""

    @property
    def label_counts(self) -> tuple[int, int]:
        """(positives, negatives): the recorded clicks, else the rows at the click rate."""
        positives = self.positives
        if positives is None:
            positives = round(self.rows * self.positive_rate)
        return positives, self.rows - positives

    @property
    def day_list(self) -> tuple[str, ...]:
        """Every UTC day of the split, in order (ISO dates)."""
        first, _, last = self.days.partition(" .. ")
        if not first:
            return ()
        start, end = dt.date.fromisoformat(first), dt.date.fromisoformat(last or first)
        return tuple(
            (start + dt.timedelta(days=i)).isoformat() for i in range((end - start).days + 1)
        )


@dataclass(frozen=True)
class Window:
    """The days a dataset was built from (ISO dates; the ``*_days`` as ``"first .. last"``)."""

    start: str
    end: str
    history_start: str = ""
    train_days: str = ""
    val_days: str = ""
    test_days: str = ""


@dataclass(frozen=True)
class DatasetMeta:
    """A dataset folder's ``meta.json``, checked against the contract this code reads."""

    schema_version: int
    seq_len: int
    neg_len: int
    arrays: Mapping[str, ArraySpec]
    splits: Mapping[str, SplitInfo]
    fingerprint: str | None = None
    """Digest of the raw inputs and the preprocess settings (None in a hand-made document)."""
    window: Window | None = None
    buckets: Mapping[str, Any] = field(default_factory=dict)
    """Id hash table sizes (``item``, ``user``, ``category``, ``gap``) and the id key's digest."""
    context_features: Mapping[str, int] = field(default_factory=dict)
    dense_features: Mapping[str, Any] = field(default_factory=dict)
    """``names`` of the dense columns, their ``mean``/``std`` on train, and the count state."""
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Every file of the folder but meta.json: relative path -> {bytes, sha256}."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    rows: Mapping[str, Any] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The whole document as written."""
    source: Path | None = field(default=None, compare=False)
    """The meta.json it was read from (errors name it)."""

    @classmethod
    def from_document(cls, doc: Any, source: str | Path | None = None) -> DatasetMeta:
        """The typed document; DatasetError naming ``source`` and the field when it is not one this
        code reads."""
        where = str(source) if source is not None else META_FILE
        if not isinstance(doc, dict):
            raise DatasetError(f"{where}: expected a JSON object, found {type(doc).__name__}")
        found = doc.get("schema_version")
        if found != SCHEMA_VERSION:
            raise DatasetError(
                f"{where}: schema_version {found!r} is not supported "
                f"(this code reads schema_version {SCHEMA_VERSION}; run preprocess "
                f"again on the raw events to rebuild the dataset)"
            )
        lengths = {name: doc.get(name) for name in ("seq_len", "neg_len")}
        for name, value in lengths.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise DatasetError(
                    f"{where}: field {name} must be an integer >= 1, found {value!r}"
                )
        return cls(
            schema_version=found,
            seq_len=lengths["seq_len"],
            neg_len=lengths["neg_len"],
            arrays=_arrays(doc.get("arrays"), lengths["seq_len"], lengths["neg_len"], where),
            splits=_splits(doc.get("splits"), where),
            fingerprint=doc.get("fingerprint"),
            window=_window(doc.get("window"), where),
            buckets=_mapping(doc, "buckets", where),
            context_features=_mapping(doc, "context_features", where),
            dense_features=_mapping(doc, "dense_features", where),
            files=_mapping(doc, FILES_KEY, where),
            inputs=_mapping(doc, "inputs", where),
            rows=_mapping(doc, "rows", where),
            seconds=_mapping(doc, "seconds", where),
            document=doc,
            source=Path(source) if source is not None else None,
        )

    @classmethod
    def read(cls, data_dir: str | Path, splits: Sequence[str] = SPLITS) -> DatasetMeta:
        """The meta.json of dataset folder ``data_dir``, with each of ``splits`` recorded and its
        folder and array files present (their contents are checked where they are opened)."""
        data_dir = Path(data_dir)
        path = data_dir / META_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise DatasetError(
                f"{path}: not found (is {data_dir} a preprocessed dataset?)"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DatasetError(f"{path}: unreadable ({exc})") from None
        meta = cls.from_document(doc, path)
        for split in splits:
            rows = meta.split(split).rows
            folder = data_dir / split
            if not folder.is_dir():
                raise DatasetError(f"{folder}: split folder missing (meta.json lists {rows} rows)")
            for name in meta.arrays:
                if not (folder / f"{name}.npy").is_file():
                    raise DatasetError(f"{folder / f'{name}.npy'}: array file missing")
        return meta

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of a split across every array."""
        return sum(spec.row_bytes for spec in self.arrays.values())

    def split(self, name: str) -> SplitInfo:
        """One split's record; DatasetError naming the file when the document has none."""
        if name not in self.splits:
            raise DatasetError(
                f"{self.source or META_FILE}: field splits.{name}.rows is missing or not a count"
            )
        return self.splits[name]

    def require_both_labels(self, split: str, why: str) -> None:
        """DatasetError unless ``split`` holds clicks and non-clicks: AUC is undefined otherwise."""
        info = self.split(split)
        if info.rows == 0 or info.positives in (0, info.rows):
            raise DatasetError(
                f"{self.source or META_FILE}: the {split} split has {info.rows} rows and "
                f"{info.positives} clicks; {why} needs both clicks and non-clicks (widen the "
                f"window, or check the labels of its days)"
            )

    def to_document(self) -> dict[str, Any]:
        """The document to write: as read, with the typed fields as they are now."""
        typed = {
            "schema_version": self.schema_version,
            "seq_len": self.seq_len,
            "neg_len": self.neg_len,
            "arrays": {
                k: {"dtype": a.dtype, "row_shape": list(a.row_shape)}
                for k, a in self.arrays.items()
            },
            "splits": {
                k: {
                    key: value
                    for key, value in dataclasses.asdict(s).items()
                    if value is not None and value != ""
                }
                for k, s in self.splits.items()
            },
            "fingerprint": self.fingerprint,
            "window": dataclasses.asdict(self.window) if self.window else None,
        }
        return {**self.document, **{k: v for k, v in typed.items() if v is not None}}

    def write(self, folder: str | Path) -> Path:
        """Write ``folder/meta.json`` atomically (a reader never sees half a document)."""
        return atomic_write_json(Path(folder) / META_FILE, self.to_document())


def _mapping(doc: dict, name: str, where: str) -> Mapping[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: field {name} is not an object")
    return value


def _arrays(value: Any, seq_len: int, neg_len: int, where: str) -> dict[str, ArraySpec]:
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: field arrays is missing or not an object")
    arrays = {}
    for name, (dtype, row_shape) in array_specs(seq_len, neg_len).items():
        spec = value.get(name)
        if not isinstance(spec, dict) or "dtype" not in spec or "row_shape" not in spec:
            raise DatasetError(f"{where}: field arrays.{name} is missing or incomplete")
        if spec["dtype"] != dtype or list(spec["row_shape"]) != list(row_shape):
            raise DatasetError(
                f"{where}: field arrays.{name} is {spec['dtype']} {list(spec['row_shape'])}, "
                f"schema_version {SCHEMA_VERSION} with seq_len {seq_len}, neg_len {neg_len} needs "
                f"{dtype} {list(row_shape)}"
            )
        arrays[name] = ArraySpec(dtype, tuple(row_shape))
    return arrays


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _splits(value: Any, where: str) -> dict[str, SplitInfo]:
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: field splits is missing or not an object")
    splits = {}
    for name, info in value.items():
        if not isinstance(info, dict) or not _count(info.get("rows")):
            raise DatasetError(f"{where}: field splits.{name}.rows is missing or not a count")
        positives = info.get("positives")
        rate = info.get("positive_rate") or 0.0
        if (positives is not None and not _count(positives)) or not (
            isinstance(rate, int | float) and not isinstance(rate, bool) and 0 <= rate <= 1
        ):
            raise DatasetError(
                f"{where}: field splits.{name}: positives {positives!r} / positive_rate "
                f"{rate!r} are not a count and a share"
            )
        splits[name] = SplitInfo(info["rows"], float(rate), positives, str(info.get("days") or ""))
    return splits


def _window(value: Any, where: str) -> Window | None:
    if value is None:
        return None
    names = {f.name for f in dataclasses.fields(Window)}
    if not isinstance(value, dict) or not {"start", "end"} <= value.keys():
        raise DatasetError(f"{where}: field window needs start and end")
    return Window(**{k: str(v) for k, v in value.items() if k in names})


def write_pointer(path: str | Path, meta: DatasetMeta, uri: str) -> dict:
    """Write the small file a KFP Dataset artifact holds: where the dataset is and what it is (the
    arrays stay on shared storage; :func:`components.common.dataset.read_pointer` reads it back);
    returns the artifact's metadata (uri, fingerprint, rows per split)."""
    document = meta.to_document()
    pointer = {"uri": uri, "fingerprint": meta.fingerprint, "splits": document["splits"]}
    Path(path).write_text(json.dumps(pointer))
    return {
        "uri": uri,
        "fingerprint": meta.fingerprint,
        **{f"{split}_rows": meta.split(split).rows for split in SPLITS},
    }
