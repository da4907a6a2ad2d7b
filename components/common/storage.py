"""Atomic writes: a reader never sees a half-written file or folder.

Everything is written under a temporary name beside its destination and
renamed into place only when complete (rename is atomic on one filesystem).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TMP_MARKER = ".tmp-"


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f"{path.name}{TMP_MARKER}{uuid.uuid4().hex[:12]}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file + fsync + rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON (stable bytes for stable input)."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"
    return atomic_write_bytes(path, text.encode())


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temp folder that replaces ``path`` only if the block succeeds.

    On an exception the temp folder is removed and ``path`` is left as it was.
    An existing ``path`` is moved aside first and deleted after the swap, so
    at every instant ``path`` is either the old complete output or the new one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path)
    tmp.mkdir()
    try:
        yield tmp
        old = None
        if path.exists():
            old = _tmp_sibling(path)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Delete temp siblings of ``path`` left behind by killed runs; return them."""
    path = Path(path)
    if not path.parent.exists():
        return []
    stale = sorted(path.parent.glob(f"{path.name}{TMP_MARKER}*"))
    for item in stale:
        if item.is_dir():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)
    return stale
