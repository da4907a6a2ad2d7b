"""Stop a process and everything it started when it is told to stop (SIGTERM, SIGINT).

A supervisor's ``kill <pid>`` (or a closed terminal's SIGHUP) reaches one process: the task shells, torchrun
and its workers that a local run started would keep running (and writing
checkpoints) without it. :func:`stop_tree_on_signals` makes SIGTERM, SIGINT and SIGHUP
stop every descendant (SIGTERM, a grace period, then SIGKILL) and then raise
:class:`Stopped` in the main thread, so the run's own cleanup (``finally``
blocks: the storage lock, temp files) still runs.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import psutil

GRACE_S = 5.0


class Stopped(BaseException):
    """The process was told to stop (a BaseException: no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def stop_descendants(grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM to every descendant of this process, SIGKILL to those still alive after ``grace_s``;
    returns their pids. Repeats until none is left (a dying parent may just have started one)."""
    me, stopped = psutil.Process(), []
    for _ in range(5):
        children = me.children(recursive=True)
        if not children:
            break
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _, alive = psutil.wait_procs(children, timeout=grace_s)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(alive, timeout=grace_s)
        stopped += [c.pid for c in children]
    return stopped


@contextlib.contextmanager
def stop_tree_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
                         grace_s: float = GRACE_S) -> Iterator[None]:
    """Within the block, a signal in ``signals`` stops every descendant, then raises :class:`Stopped`."""
    def handler(signum, frame):
        for sig in signals:  # a second signal while stopping must not interrupt the cleanup
            signal.signal(sig, signal.SIG_IGN)
        stop_descendants(grace_s)
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
