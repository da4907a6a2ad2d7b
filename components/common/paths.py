"""Keep what a run writes inside its storage root, whatever a user types into the run form."""

from __future__ import annotations

import re
from pathlib import Path

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class PathError(ValueError):
    """A user-given name or location that would escape the storage root."""


def safe_name(value: str, what: str) -> str:
    """A single path component: letters, digits, ``._-``; no ``/``, no ``..``."""
    if not _NAME.fullmatch(value or "") or value in (".", ".."):
        raise PathError(
            f"{what} {value!r} must be 1-128 characters of letters, digits, '.', '_', '-' "
            f"(it names a folder under the storage root)"
        )
    return value


def inside(root: str | Path, path: str | Path, what: str) -> Path:
    """``path`` resolved (symlinks, ``..``), refused unless it lies within ``root``."""
    base, target = Path(root).resolve(), Path(path).resolve()
    if target != base and base not in target.parents:
        raise PathError(f"{what} {path} is outside the storage root {root}")
    return target
