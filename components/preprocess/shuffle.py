"""The memory cap of Dask's local disk shuffle, isolated here.

With the threaded (or sync) scheduler, ``shuffle_method="disk"`` keeps each shuffle's data in a
``partd.Buffer`` (``dask.dataframe.shuffle.maybe_buffered_partd``) that holds up to 1 GB in memory
before it writes to disk; Dask has no setting for it (``dataframe.shuffle.compression`` is the only
one) and its P2P shuffle, which has memory limits of its own, needs a distributed cluster (the
``local-cluster`` and ``kubernetes`` schedulers use it, and this cap does not concern them).

So for the duration of the shuffle, ``partd.Buffer``'s default ``available_memory`` is lowered, under
a lock, counted across overlapping users (the smallest cap wins) and restored when the last one
leaves. Only that documented constructor parameter is touched, and only after checking that the
installed partd still has it (else: a warning, and the shuffle runs with partd's own cap);
``tests/unit/test_shuffle_cap.py`` checks the route through Dask against the installed versions.
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import dask

from components.common.progress import get_logger

log = get_logger(__name__)

_lock = threading.Lock()
_caps: list[int] = []  # the caps of the shuffles running now
_saved: tuple | None = None  # partd's own defaults while a cap is set


def buffer_parameter() -> inspect.Parameter | None:
    """``partd.Buffer``'s ``available_memory`` parameter, if the installed partd has it as its only
    defaulted one (what the cap relies on)."""
    import partd

    try:
        parameters = inspect.signature(partd.Buffer.__init__).parameters
    except (TypeError, ValueError):
        return None
    defaulted = [p for p in parameters.values() if p.default is not inspect.Parameter.empty]
    names = [p.name for p in defaulted]
    return defaulted[0] if names == ["available_memory"] else None


def _set_buffer_default() -> None:
    import partd

    partd.Buffer.__init__.__defaults__ = (min(_caps),) if _caps else _saved


@contextlib.contextmanager
def bounded_disk_shuffle(buffer_bytes: int, spill_dir: Path) -> Iterator[None]:
    """Cap the memory of Dask's local disk shuffle at ``buffer_bytes`` and spill into ``spill_dir``
    (removed afterwards) while the block runs."""
    global _saved
    import partd

    spill_dir.mkdir(exist_ok=True)
    capped = buffer_parameter() is not None
    if not capped:
        log.warning(
            "partd %s: Buffer has no available_memory parameter; the disk shuffle buffers up to "
            "partd's own limit",
            getattr(partd, "__version__", "?"),
        )
    with _lock:
        if capped:
            if not _caps:
                _saved = partd.Buffer.__init__.__defaults__
            _caps.append(int(buffer_bytes))
            _set_buffer_default()
    try:
        with dask.config.set({"temporary_directory": str(spill_dir)}):
            yield
    finally:
        with _lock:
            if capped:
                _caps.remove(int(buffer_bytes))
                _set_buffer_default()
        shutil.rmtree(spill_dir, ignore_errors=True)
