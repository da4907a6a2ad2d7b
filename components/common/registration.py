"""A run's ``registration.json``: what the register stage did with the candidate, as one typed
document.

:class:`Registration` is its one writer (:func:`components.register.stage.register`, through
:meth:`Registration.write`) and reader (:meth:`Registration.read`; see :class:`components.common.document.Document`): the run's summary, the KFP
adapter and the tests read attributes, never keys. Its format is ``format``
(:data:`REGISTRATION_FORMAT`); a document of another format, or one missing a field marked
*required*, is refused with a :class:`RegistrationError` naming the file and the field.
docs/data.md describes every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from components.common.document import Document, DocumentError, bounded

REGISTRATION_FORMAT = "dailyrec.registration/v1"
REGISTRATION = "registration.json"
REQUIRED = ("model_name", "key", "blessed", "registered")
"""Fields every reader relies on."""


class RegistrationError(DocumentError):
    """A registration record no reader can use: the message names the file and the field."""


@dataclass(frozen=True)
class Registration(Document):
    """The candidate's version in the registry, the aliases after the move, and the card."""

    FILE: ClassVar[str] = REGISTRATION
    FORMAT: ClassVar[str] = REGISTRATION_FORMAT
    REQUIRED: ClassVar[tuple[str, ...]] = REQUIRED
    WHAT: ClassVar[str] = "registration record"
    ABSENT: ClassVar[str] = "register did not run"
    REWRITE: ClassVar[str] = "register again"
    Error: ClassVar[type[DocumentError]] = RegistrationError

    model_name: str
    """The registered model (required)."""
    key: str
    """sha256 of the checkpoint: the version's identity, so a re-run finds it (required)."""
    blessed: bool
    """The evaluation's verdict (required)."""
    registered: bool = False
    """A version holds the candidate: created now or found (required)."""
    version: int | None = bounded(1, default=None)
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
    seconds: float = bounded(0, default=0.0)
    """Wall seconds of the stage."""
    source: Path | None = field(default=None, compare=False, repr=False)
    """The file it was read from (messages name it)."""

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
