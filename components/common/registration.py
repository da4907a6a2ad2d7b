"""A run's ``registration.json``: what the register stage did with the candidate, as one typed
document.

:class:`Registration` is its one writer (:func:`components.register.stage.register`, through
:meth:`Registration.write`) and reader (:meth:`Registration.read`): the run's summary, the KFP
adapter and the tests read attributes, never keys. Its format is ``format``
(:data:`REGISTRATION_FORMAT`); a document of another format, or one missing a field marked
*required*, is refused with a :class:`RegistrationError` naming the file and the field.
docs/data.md describes every field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.storage import atomic_write_json

REGISTRATION_FORMAT = "dailyrec.registration/v1"
REGISTRATION = "registration.json"
REQUIRED = ("model_name", "key", "blessed", "registered")
"""Fields every reader relies on."""


class RegistrationError(ValueError):
    """A registration record no reader can use: the message names the file and the field."""


@dataclass(frozen=True)
class Registration:
    """The candidate's version in the registry, the aliases after the move, and the card."""

    model_name: str
    """The registered model (required)."""
    key: str
    """sha256 of the checkpoint: the version's identity, so a re-run finds it (required)."""
    blessed: bool
    """The evaluation's verdict (required)."""
    registered: bool = False
    """A version holds the candidate: created now or found (required)."""
    version: int | None = None
    reused: bool = False
    """The version existed already (a re-run after a crash, or the same model again)."""
    reason: str | None = None
    """Why nothing was registered."""
    aliases: tuple[str, ...] = ()
    """The version's aliases after the move (``champion``, ``previous``, ``challenger``)."""
    model_uri: str | None = None
    """``models:/<name>/<version>``."""
    champion_version: int | None = None
    """``@champion`` after the move (None: no champion)."""
    previous_version: int | None = None
    """``@previous``: the champion this one replaced, the rollback target."""
    champion_uri: str | None = None
    """``models:/<name>@champion`` where a champion exists."""
    model_card: str | None = None
    """The card's ``runs:/`` URI (Markdown; the JSON beside it)."""
    integrity: Mapping[str, Any] = field(default_factory=dict)
    """The version's digests (manifest, weights, signature tags) and, when it was created now,
    its file manifest."""
    seconds: float = 0.0
    """Wall seconds of the stage."""
    source: Path | None = field(default=None, compare=False, repr=False)
    """The file it was read from (messages name it)."""

    @classmethod
    def from_document(cls, doc: Any, source: str | Path | None = None) -> Registration:
        where = str(source) if source else "registration"
        if not isinstance(doc, Mapping):
            raise RegistrationError(f"{where}: not a JSON object")
        if doc.get("format") != REGISTRATION_FORMAT:
            raise RegistrationError(
                f"{where}: format is {doc.get('format')!r}, not {REGISTRATION_FORMAT!r} "
                f"(written by another version of the register stage)"
            )
        missing = [name for name in REQUIRED if name not in doc]
        if missing:
            raise RegistrationError(f"{where}: no {missing[0]!r} field")
        names = {f.name for f in dataclasses.fields(cls)} - {"source"}
        values = {k: v for k, v in doc.items() if k in names}
        values["aliases"] = tuple(values.get("aliases") or ())
        return cls(**values, source=Path(source) if source else None)

    @classmethod
    def read(cls, folder_or_file: str | Path) -> Registration:
        """The record in a run folder (or that file itself)."""
        path = Path(folder_or_file)
        if path.is_dir():
            path = path / REGISTRATION
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RegistrationError(
                f"{path}: no registration record (register did not run)"
            ) from None
        except (OSError, ValueError) as exc:
            raise RegistrationError(f"{path}: unreadable ({exc})") from None
        return cls.from_document(doc, path)

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": REGISTRATION_FORMAT}
        for f in dataclasses.fields(self):
            if f.name != "source":
                value = getattr(self, f.name)
                doc[f.name] = list(value) if isinstance(value, tuple) else value
        return json.loads(json.dumps(doc))

    def write(self, folder: str | Path) -> Path:
        path = Path(folder) / REGISTRATION
        atomic_write_json(path, self.to_document())
        return path

    def line(self) -> str:
        """One line for a person: the version, its aliases, the champion after the move."""
        if not self.registered:
            return f"{self.model_name}: nothing registered ({self.reason})"
        return (
            f"{self.model_name} version {self.version}"
            f"{' (already registered)' if self.reused else ''}, aliases "
            f"{', '.join(self.aliases) or 'none'}; champion = v{self.champion_version}"
            + (f", previous = v{self.previous_version}" if self.previous_version else "")
        )
