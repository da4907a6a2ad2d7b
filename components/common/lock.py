"""One lock per storage root: stages that must not overlap across runs take it.

Two runs on one storage root may build the same dataset folder, and both may
move ``@champion``. The lock is an ``flock`` on ``<root>/runs/.lock`` (a local
folder, or the shared volume on the cluster: NFS v4 and CSI file stores honour
it), and the file says who holds it, so a refused run can name the holder::

    another run holds the lock on /data/runs/.lock (run 20261130-0200-ab12, pid 4242 on host-a,
    since 2026-11-30T02:00:03Z); wait for it to finish or stop it

``make run`` holds it for the whole run and refuses to start while another run
holds it; inside a run the stages take it again, which succeeds at once for the
run that holds it (a token in ``$DAILYREC_LOCK_TOKEN`` says so) and waits for
another run's stage otherwise (the cluster case, where each task is its own pod).
The file holds only the token's SHA-256: reading it gives nothing to present; the
token itself lives in the environment of the holder's processes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from components.common.progress import get_logger

log = get_logger(__name__)
TOKEN_ENV = "DAILYREC_LOCK_TOKEN"
LOCK_NAME = ".lock"
TASK_WAIT_S = 2 * 3600.0
"""How long a pipeline task waits for another run's stage (a manual run beside the recurring one)."""


class LockBusy(RuntimeError):
    """Another run holds the storage root's lock; the message names it."""


def lock_path(storage_root: str | os.PathLike) -> Path:
    return Path(storage_root) / "runs" / LOCK_NAME


def root_of(folder: str | os.PathLike) -> Path:
    """The storage root of a run folder (``runs/<id>``) or a dataset folder (``datasets/<date>-<key>``)."""
    return Path(folder).parent.parent


def holder_text(info: dict) -> str:
    """``run R, pid P on HOST, since T`` of a holder record (what is known of it)."""
    parts = [
        f"run {info.get('run_id') or '?'}",
        f"pid {info.get('pid', '?')} on {info.get('host', '?')}",
        f"since {info.get('since', '?')}",
    ]
    if info.get("stage"):
        parts.insert(1, f"stage {info['stage']}")
    return ", ".join(parts)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _read_holder(fd: int) -> dict:
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace")
        return json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}


def _is_the_lock_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not one unlinked or replaced since it was
    opened)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _reopened(fd: int, path: Path) -> int:
    """A descriptor of the file now at ``path``, ``fd`` (no longer the lock file) closed."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _holder(run_id: str, stage: str | None, token: str) -> dict:
    """The record the lock file holds: who holds it, since when, and its token's digest only."""
    return {
        "run_id": run_id,
        "stage": stage,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "token_sha256": _digest(token),
    }


@contextlib.contextmanager
def storage_lock(
    storage_root: str | os.PathLike,
    run_id: str,
    stage: str | None = None,
    wait_s: float = 0.0,
    poll_s: float = 2.0,
) -> Iterator[dict]:
    """Hold the storage root's lock for the block; yields the holder record.

    ``wait_s`` 0 fails at once with :class:`LockBusy`; otherwise it waits up to
    ``wait_s`` seconds, saying every minute who it waits for. Reentrant for the
    run that holds it (its processes inherit the token).
    """
    path = lock_path(storage_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline, said = time.monotonic() + wait_s, 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _is_the_lock_file(fd, path):
                    break
                fd = _reopened(fd, path)  # removed or replaced: a lock on it guards nothing
                continue
            except BlockingIOError:
                info = _read_holder(fd)
                token = os.environ.get(TOKEN_ENV)
                if token and info.get("token_sha256") == _digest(token):  # our own run holds it
                    yield {**info, "token": token}
                    return
                now = time.monotonic()
                if now >= deadline:
                    raise LockBusy(
                        f"another run holds the lock on {path} ({holder_text(info)}); "
                        f"wait for it to finish or stop it"
                    ) from None
                if now - said >= 60:
                    log.warning(
                        "%s: waiting for the lock on %s held by %s",
                        stage or run_id,
                        path,
                        holder_text(info),
                    )
                    said = now
                time.sleep(min(poll_s, max(deadline - now, 0.05)))
        token = os.environ.get(TOKEN_ENV) or secrets.token_hex(16)
        info = _holder(run_id, stage, token)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        previous = os.environ.get(TOKEN_ENV)
        os.environ[TOKEN_ENV] = token  # child processes (tasks, workers) are part of this holder
        try:
            yield {**info, "token": token}
        finally:
            if previous is None:
                os.environ.pop(TOKEN_ENV, None)
            else:
                os.environ[TOKEN_ENV] = previous
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing releases the flock
