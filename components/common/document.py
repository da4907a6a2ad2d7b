"""What one stage hands the next as a file: a typed, versioned JSON document.

A :class:`Document` subclass is a frozen dataclass that is its file's one writer
(:meth:`Document.write`) and reader (:meth:`Document.read`, :meth:`Document.from_document`), so its
readers use attributes, never keys. Each names its file (``FILE``), its format (``FORMAT``, written
into the document as ``format``) and the fields every reader relies on (``REQUIRED``); a document
of another format, or one missing a required field, is refused with the subclass's ``Error``
naming the file and the field. docs/data.md describes each format field by field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from components.common.storage import atomic_write_json


class DocumentError(ValueError):
    """A document no reader can use: the message names the file and the field."""


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
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name == "source":
                values["source"] = Path(source) if source else None
            elif f.name in doc:
                value = doc[f.name]
                is_tuple = str(f.type).startswith("tuple")
                values[f.name] = tuple(value) if is_tuple and value is not None else value
        try:
            return cls(**values)
        except cls.Error as exc:  # a field's own check (``__post_init__``): name the file too
            raise cls.Error(f"{where}: {exc}") from None

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
        """Atomically, as :attr:`FILE` in ``folder``."""
        path = Path(folder) / self.FILE
        atomic_write_json(path, self.to_document())
        return path
