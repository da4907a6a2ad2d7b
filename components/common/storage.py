"""Atomic writes: a reader never sees a half-written file or folder.

Everything is written under a temporary name beside its destination and
renamed into place only when complete (rename is atomic on one filesystem).

Every temp has an owner file beside it (``<temp>.owner``) that its writer holds
locked (``flock``) for as long as it writes: cleaning up after killed runs
removes only temps whose owner lock is free, never a live run's (another run on
the same storage root may be writing one at this very moment).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TMP_MARKER = ".tmp-"
OWNER_SUFFIX = ".owner"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NO_RETRY_EXIT = 28
"""Exit code of a process that failed on a full disk (as errno ENOSPC): restarting it cannot help."""


class NoSpaceError(OSError):
    """A write failed because the filesystem (or the user's quota) is full; the message names the path."""

    def __init__(self, path: str | os.PathLike, stage: str | None = None) -> None:
        self.path, self.stage = str(path), stage
        super().__init__(errno.ENOSPC, no_space_message(path, stage))

    def __str__(self) -> str:
        return self.strerror


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` means a full disk: ENOSPC/EDQUOT, or numpy's errno-less short write."""
    if not isinstance(exc, OSError):
        return False
    if isinstance(exc, NoSpaceError) or exc.errno in _NO_SPACE:
        return True
    # ndarray.tofile / np.save on a full disk: "OSError: 10800 requested and 7136 written"
    return exc.errno is None and "requested and" in str(exc) and "written" in str(exc)


def no_space_message(path: str | os.PathLike, stage: str | None = None) -> str:
    """``"<stage>: no space left on <path> (N MiB free there now); ..."``."""
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = f" ({shutil.disk_usage(where).free / 2**20:.0f} MiB free there now)"
    except OSError:
        free = ""
    return f"{stage + ': ' if stage else ''}no space left on {str(path)!r}{free}; free some space and rerun"


@contextlib.contextmanager
def disk_full_as(stage: str | None, path: str | os.PathLike) -> Iterator[None]:
    """A full-disk error in the block becomes one :class:`NoSpaceError` naming ``stage`` and the path
    (the file the error names, else ``path``); other errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        if not no_space(exc):
            raise
        if isinstance(exc, NoSpaceError):
            if exc.stage or not stage:
                raise
            raise NoSpaceError(exc.path, stage) from exc
        raise NoSpaceError(getattr(exc, "filename", None) or path, stage) from exc


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f"{path.name}{TMP_MARKER}{uuid.uuid4().hex[:12]}")


@contextlib.contextmanager
def owned_temp(path: str | os.PathLike) -> Iterator[Path]:
    """A fresh temp name beside ``path`` whose owner file stays locked while the block runs.

    The owner file is created and locked before the temp exists and unlinked only
    after it is gone (renamed or removed), so a temp without a locked owner is a
    dead writer's: :func:`remove_stale_temps` may take it.
    """
    path = Path(path)
    while True:
        tmp = _tmp_sibling(path)
        owner = tmp.with_name(tmp.name + OWNER_SUFFIX)
        fd = os.open(owner, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:  # a cleaner may have taken and unlinked it between create and lock: start over
            if os.stat(owner).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield tmp
    finally:
        owner.unlink(missing_ok=True)
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file + fsync + rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with owned_temp(path) as tmp, disk_full_as(None, path):
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
    with owned_temp(path) as tmp:
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


@contextlib.contextmanager
def _owner_free(owner: Path) -> Iterator[bool]:
    """True (and the owner lock held) when nobody holds ``owner``'s lock or it does not exist."""
    try:
        fd = os.open(owner, os.O_RDWR)  # read-write: NFS grants exclusive locks only to writers
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Delete temp siblings of ``path`` left behind by killed runs; return them.

    A temp whose owner lock is held belongs to a live writer (another run) and is kept.
    """
    path = Path(path)
    if not path.parent.exists():
        return []
    removed = []
    for item in sorted(path.parent.glob(f"{path.name}{TMP_MARKER}*")):
        if item.name.endswith(OWNER_SUFFIX):
            continue
        owner = item.with_name(item.name + OWNER_SUFFIX)
        with _owner_free(owner) as free:
            if not free:
                continue
            if item.is_dir() and not item.is_symlink():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink(missing_ok=True)
            owner.unlink(missing_ok=True)
            removed.append(item)
    for owner in sorted(path.parent.glob(f"{path.name}{TMP_MARKER}*{OWNER_SUFFIX}")):
        with _owner_free(owner) as free:  # an owner whose temp is gone: its writer died in between
            if free and not owner.with_name(owner.name[: -len(OWNER_SUFFIX)]).exists():
                owner.unlink(missing_ok=True)
    return removed
