"""What one stage hands the next as a file: a typed, versioned JSON document.

A :class:`Document` subclass is a frozen dataclass that is its file's one writer
(:meth:`Document.write`) and reader (:meth:`Document.read`, :meth:`Document.from_document`), so its
readers use attributes, never keys. Each names its file (``FILE``), its format (``FORMAT``, written
into the document as ``format``) and the fields every reader relies on (``REQUIRED``); a document
of another format, or one missing a required field, is refused with the subclass's ``Error``
naming the file and the field. Every field is checked against its annotation as it is read —
``"false"`` is no ``bool``, ``"0.99"`` no ``float``, ``[]`` no mapping; nothing is coerced — and
against its range where it declares one (:func:`bounded`); a float is a finite number or NaN
(not measured), never an infinity. docs/data.md describes each format field by field.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from components.common.storage import atomic_write_json


class DocumentError(ValueError):
    """A document no reader can use: the message names the file and the field."""


RANGE = "range"
"""The key of a field's metadata that holds its bounds (:func:`bounded`)."""


def bounded(low: float | None = None, high: float | None = None, **kwargs: Any) -> Any:
    """A dataclass field whose numbers must lie in ``[low, high]`` (a bound of None: open), checked
    as the document is read; ``kwargs`` go to :func:`dataclasses.field`."""
    return dataclasses.field(metadata={RANGE: (low, high)}, **kwargs)


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def type_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` (read from JSON) is not a ``hint``, or None when it is. Strict: a bool is no
    number, a number no string, a string no bool; a float may be NaN (not measured), never
    infinite."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return None
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        problems = [type_problem(value, a) for a in kinds]
        return None if None in problems else f"expected {' or '.join(map(_describe, args))}"
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return None if not math.isinf(value) else "expected a finite number"
        ok = False
    elif hint is str:
        ok = isinstance(value, str)
    elif origin is tuple or hint is tuple:
        if not isinstance(value, (list, tuple)):
            return "expected a list"
        item = args[0] if args else Any
        found = next((p for v in value if (p := type_problem(v, item))), None)
        return None if found is None else f"an item: {found}"
    elif origin in (Mapping, dict) or hint in (Mapping, dict):
        if not isinstance(value, Mapping):
            return "expected an object"
        item = args[1] if len(args) == 2 else Any
        found = next((p for v in value.values() if (p := type_problem(v, item))), None)
        return None if found is None else f"a value: {found}"
    else:
        return None  # a type JSON does not carry (``source``): the dataclass checks it
    return None if ok else f"expected {_describe(hint)}"


class Document:
    """The reading and writing every stage document shares, mixed into a frozen dataclass (whose
    last field may be ``source: Path | None``: the file it was read from, for messages)."""

    FILE: ClassVar[str]
    """Its file name in the stage's output folder."""
    FORMAT: ClassVar[str]
    """``<product>.<document>/v<N>``: a reader refuses any other."""
    REQUIRED: ClassVar[tuple[str, ...]]
    """Fields every reader relies on; the rest have defaults an older writer may have left out."""
    WHAT: ClassVar[str]
    """What it is, for messages (``training summary``)."""
    ABSENT: ClassVar[str]
    """Why the file would be missing (``the training did not finish``)."""
    REWRITE: ClassVar[str]
    """What to do with one of another format (``train again``)."""
    Error: ClassVar[type[DocumentError]] = DocumentError
    UNVERSIONED_IS_FIRST: ClassVar[bool] = False
    """A document without ``format`` (written before documents carried one) reads as this
    format: for a first version whose fields did not change."""

    @classmethod
    def from_document(cls, doc: Any, source: str | Path | None = None) -> Self:
        where = str(source) if source else cls.WHAT
        if not isinstance(doc, Mapping):
            raise cls.Error(f"{where}: not a JSON object")
        found = doc.get("format", cls.FORMAT if cls.UNVERSIONED_IS_FIRST else None)
        if found != cls.FORMAT:
            raise cls.Error(
                f"{where}: format is {found!r}, not {cls.FORMAT!r} "
                f"(written by another version of dailyrec: {cls.REWRITE})"
            )
        missing = [name for name in cls.REQUIRED if name not in doc]
        if missing:
            raise cls.Error(f"{where}: no {missing[0]!r} field")
        values: dict[str, Any] = {}
        hints = cls._hints()
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name == "source":
                values["source"] = Path(source) if source else None
            elif f.name in doc:
                value = doc[f.name]
                problem = type_problem(value, hints[f.name]) or _out_of_range(value, f)
                if problem:
                    raise cls.Error(f"{where}: {f.name} {_shown(value)}: {problem}")
                is_tuple = str(f.type).startswith("tuple")
                values[f.name] = tuple(value) if is_tuple and value is not None else value
        try:
            return cls(**values)
        except cls.Error as exc:  # a field's own check (``__post_init__``): name the file too
            raise cls.Error(f"{where}: {exc}") from None

    @classmethod
    @functools.cache
    def _hints(cls) -> dict[str, Any]:
        """The fields' annotations, resolved (the modules write them as strings)."""
        return typing.get_type_hints(cls)

    @classmethod
    def read(cls, folder_or_file: str | Path) -> Self:
        """The document in a stage's output folder (or that file itself)."""
        path = Path(folder_or_file)
        if path.is_dir():
            path = path / cls.FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise cls.Error(f"{path}: no {cls.WHAT} ({cls.ABSENT})") from None
        except (OSError, ValueError) as exc:
            raise cls.Error(f"{path}: unreadable ({exc})") from None
        return cls.from_document(doc, path)

    @classmethod
    def find(cls, folder_or_file: str | Path) -> Self | None:
        """The document, or None where its stage did not run (or left one no stage can read)."""
        try:
            return cls.read(folder_or_file)
        except DocumentError:
            return None

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": self.FORMAT}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name != "source":
                value = getattr(self, f.name)
                doc[f.name] = list(value) if isinstance(value, tuple) else value
        return json.loads(json.dumps(doc))  # plain JSON types, what the reader gets back

    def write(self, folder: str | Path) -> Path:
        """Atomically, as :attr:`FILE` in ``folder``; one its readers would refuse (a field of the
        wrong type or out of its range) is refused here, before anything is written."""
        path = Path(folder) / self.FILE
        document = self.to_document()
        type(self).from_document(document, path)  # the readers' checks, on what they would read
        atomic_write_json(path, document)
        return path


def _out_of_range(value: Any, f: dataclasses.Field) -> str | None:
    low, high = f.metadata.get(RANGE, (None, None))
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        return None  # not a number (the type check's), or NaN: not measured
    if (low is not None and not value >= low) or (high is not None and not value <= high):
        return f"expected {'-inf' if low is None else low} .. {'inf' if high is None else high}"
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
