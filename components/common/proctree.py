"""Stop a process and everything it started when it is told to stop (SIGTERM, SIGINT).

A supervisor's ``kill <pid>`` (or a closed terminal's SIGHUP) reaches one process: the task shells, torchrun
and its workers that a local run started would keep running (and writing
checkpoints) without it. :func:`stop_tree_on_signals` makes SIGTERM, SIGINT and SIGHUP
stop every descendant (SIGTERM, a grace period, then SIGKILL) and then raise
:class:`Stopped` in the main thread, so the run's own cleanup (``finally``
blocks: the storage lock, temp files) still runs.

SIGKILL cannot be caught: for that, :func:`orphan_watchdog` starts a small
process that waits for the run's process to end and then stops every process
still carrying the run's lock token in its environment (every task, torchrun
and worker inherits it), so nothing of a killed run keeps writing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil

from components.common.lock import TOKEN_ENV

GRACE_S = 5.0


class Stopped(BaseException):
    """The process was told to stop (a BaseException: no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def stop_all(procs: list[psutil.Process], grace_s: float = GRACE_S) -> None:
    """SIGTERM to ``procs``, SIGKILL to those still alive after ``grace_s``."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def stop_until_none(find, grace_s: float = GRACE_S) -> list[int]:
    """Stop what ``find()`` returns, again until it returns nothing (a dying parent may just have
    started one more); returns their pids."""
    stopped: list[int] = []
    for _ in range(5):
        procs = find()
        if not procs:
            break
        stop_all(procs, grace_s)
        stopped += [p.pid for p in procs]
    return stopped


def stop_descendants(grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM to every descendant of this process, SIGKILL to those still alive after ``grace_s``;
    returns their pids."""
    me = psutil.Process()
    return stop_until_none(lambda: me.children(recursive=True), grace_s)


class _Deferred:
    """The main thread's sections a stop must not cut in half, and the stop that waits for them."""

    depth = 0
    signum: int | None = None


@contextlib.contextmanager
def stop_deferred() -> Iterator[None]:
    """Within the block a stop (:func:`stop_tree_on_signals`) waits until the block ends: for a
    call that must not be cut in half, such as a write to the tracking store, which an exception
    raised in the middle of it leaves locked for the run's own last write (its KILLED status).
    Only the main thread's blocks count: signals are handled there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Deferred.depth += 1
    try:
        yield
    finally:
        _Deferred.depth -= 1
        if _Deferred.depth == 0 and _Deferred.signum is not None:
            signum, _Deferred.signum = _Deferred.signum, None
            raise Stopped(signum)


def _stop(signum: int) -> None:
    """Raise the stop now, or keep it for the end of the deferred section the main thread is in."""
    if _Deferred.depth:
        _Deferred.signum = signum
        return
    raise Stopped(signum)


@contextlib.contextmanager
def stop_tree_on_signals(
    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
    grace_s: float = GRACE_S,
) -> Iterator[None]:
    """Within the block, a signal in ``signals`` stops every descendant, then raises :class:`Stopped`.
    A child forked within the block (a data loader's worker) inherits the handler: there the
    signal acts as if none were installed.

    Python runs a signal handler wherever the main thread happens to be, and where it is running a
    weakref callback, a ``__del__`` or the garbage collector it prints the exception and carries
    on: the stop would be lost, and the main thread, its children gone, could wait forever (on a
    data loader's queue that a killed worker left half written). So a :class:`Stopped` that Python
    swallows is delivered again, by a real signal that also interrupts a blocking read, until it
    reaches the main code."""
    owner = os.getpid()
    main_thread = threading.main_thread().ident

    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for sig in signals:  # a second signal while stopping must not interrupt the cleanup
            signal.signal(sig, signal.SIG_IGN)
        stop_descendants(grace_s)
        _stop(signum)

    swallowed: list[int] = []  # a stop Python swallowed, until the main code has it
    in_hook = threading.Event()

    def raise_again(signum, frame):
        if in_hook.is_set():  # it would be swallowed again: the sender tries again shortly
            return
        signal.signal(signum, signal.SIG_IGN)
        swallowed.clear()
        _stop(signum)

    def send_again(signum: int) -> None:
        while swallowed:  # a real signal: it also interrupts a read the main thread is blocked in
            signal.pthread_kill(main_thread, signum)
            time.sleep(0.1)

    def unraisable(info) -> None:
        if not (isinstance(info.exc_value, Stopped) and os.getpid() == owner):
            hook(info)
            return
        in_hook.set()
        try:
            swallowed[:] = [info.exc_value.signum]
            signal.signal(info.exc_value.signum, raise_again)
            threading.Thread(target=send_again, args=swallowed[:], daemon=True).start()
        finally:
            in_hook.clear()

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for sig, old in previous.items():
            signal.signal(sig, old)


def carrying(token: str, exclude: set[int]) -> list[psutil.Process]:
    """This user's processes whose environment has ``$DAILYREC_LOCK_TOKEN`` = ``token``."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in exclude:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(TOKEN_ENV) == token:
                found.append(proc)
    return found


def watch(pid: int, token: str, grace_s: float = GRACE_S) -> list[int]:
    """Wait for ``pid`` to end, then stop what still carries ``token``; returns their pids."""
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait()
    return stop_until_none(lambda: carrying(token, {os.getpid()}), grace_s)


@contextlib.contextmanager
def orphan_watchdog(token: str) -> Iterator[subprocess.Popen]:
    """For the block: a watchdog process that stops this run's leftovers if this process dies, even by
    SIGKILL (see the module's docstring). It ends by itself when this process does."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}  # it must not match itself
    dog = subprocess.Popen(
        [sys.executable, "-m", "components.common.proctree", str(os.getpid())],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # outside our signals
    # the token on its stdin, never its command line: every user of the machine can read that
    dog.stdin.write(token.encode() + b"\n")
    dog.stdin.close()
    try:
        yield dog
    finally:
        dog.terminate()  # a normal end: the run's own handlers stopped its processes
        with contextlib.suppress(subprocess.TimeoutExpired):
            dog.wait(timeout=GRACE_S)


if __name__ == "__main__":  # the watchdog: python -m components.common.proctree PID, TOKEN on stdin
    watch(int(sys.argv[1]), sys.stdin.readline().strip())
