"""Polling helper shared by the fault-injection tests."""

from __future__ import annotations

import time


def wait_for(condition, timeout: float, what: str, poll: float = 0.02):
    """``condition()``'s first truthy value, polled every ``poll`` s; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def trainer_processes(pid: int) -> list:
    """The training workers (``components.train``) among ``pid``'s descendants; processes that end or
    turn zombie while being looked at (a task shell that just exited) are skipped."""
    import psutil

    found = []
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            if "components.train" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found
