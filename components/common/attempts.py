"""Which failures a retried task may repeat, and which it must not.

On a cluster KFP retries a failed task (``pipelines/steps.py``); the retry policy cannot look at
why it failed. A second attempt helps when the first lost its pod (eviction, node loss) or met a
service that was briefly down; it cannot help when the input is bad, the disk is full or the
TrainJob already used its JobSet restarts -- it would only repeat the failure, and for training
repeat GPU launches for hours. So a task records such a *final* failure, and a later attempt of
the same KFP run fails at once with the first attempt's message instead of doing the work again.

Final: :class:`FinalError`, an error carrying ``final = True`` (a TrainJob that failed for good),
bad input (the ``ValueError`` family: exit status 2), a full disk (exit status 28). Everything
else (``RuntimeError``, ``OSError``: exit status 1) may be retried.

The record belongs to one KFP run (``$KFP_RUN_ID``, set on every task's pod from its
``pipeline/runid`` label): another run, or a local run (no retries, no id), is never blocked.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from components.common.cli import Exit, exit_for
from components.common.records import read_record
from components.common.storage import atomic_write_json

RUN_ID_ENV = "KFP_RUN_ID"


def final_record(run_dir: str | os.PathLike, stage: str) -> Path:
    """Where an attempt of ``stage`` records a final failure: ``runs/<id>/stages/<stage>.final.json``."""
    return Path(run_dir) / "stages" / f"{stage}.final.json"


class FinalError(RuntimeError):
    """A failure another attempt of the same task cannot fix; the message says why."""

    final = True

    def __init__(self, message: str, exit_status: int | None = None) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def is_final(exc: BaseException) -> bool:
    """Whether a retry of the task that raised ``exc`` would fail the same way."""
    if getattr(exc, "final", False):
        return True
    if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: a stop, not a verdict
        return False
    return exit_for(exc) in (Exit.USAGE, Exit.NO_SPACE)


@contextlib.contextmanager
def attempt(record: str | os.PathLike, what: str, run_id: str | None = None) -> Iterator[None]:
    """Run the block as one attempt of task ``what``; ``record``: where its final failure is kept.

    An earlier attempt of this KFP run that failed for good raises :class:`FinalError` before the
    block starts; a final failure of this attempt is recorded, then raised as it was.
    """
    record = Path(record)
    run_id = os.environ.get(RUN_ID_ENV) if run_id is None else run_id
    earlier = read_record(record)
    if run_id and earlier.get("kfp_run_id") == run_id:
        raise FinalError(
            f"{what}: not retried: an earlier attempt of this run failed in a way another attempt "
            f"cannot fix: {earlier.get('error')}",
            earlier.get("exit_status"),
        )
    try:
        yield
    except BaseException as exc:
        if run_id and is_final(exc):
            with contextlib.suppress(OSError):  # a full disk must still raise its own error
                atomic_write_json(
                    record,
                    {
                        "kfp_run_id": run_id,
                        "task": what,
                        "error": " ".join(str(exc).split())[:2000] or type(exc).__name__,
                        "error_type": type(exc).__name__,
                        "exit_status": int(getattr(exc, "exit_status", None) or exit_for(exc)),
                        "at": time.time(),
                    },
                )
        raise
