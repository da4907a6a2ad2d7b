"""How a stage that records an MLflow run ends when it is told to stop.

A process killed by a signal it does not handle leaves its MLflow run RUNNING forever (a pod's
SIGTERM, torchrun stopping its ranks, a cancelled KFP run, ``kill``), and MLflow's own
``with start_run()`` ends every exception FAILED. So the stages that record runs (train,
evaluate, register) run their CLI through :func:`run_main` (SIGTERM, SIGINT and SIGHUP raise
:class:`~components.common.proctree.Stopped` once the process's children are stopped) and end
their run with :func:`run_status`: FINISHED, FAILED on an error, KILLED when stopped
(:func:`started_run` for a run that is one block; the trainer closes its own). Their KFP adapters
wrap the stage the same way (:func:`~components.common.proctree.stop_tree_on_signals`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from components.common.cli import signal_exit
from components.common.proctree import Stopped, stop_deferred, stop_tree_on_signals


def run_status(exc: BaseException | None) -> str:
    """The status an MLflow run ends with when its work ended with ``exc`` (None: done)."""
    if exc is None:
        return "FINISHED"
    return "KILLED" if isinstance(exc, Stopped | KeyboardInterrupt | SystemExit) else "FAILED"


@contextlib.contextmanager
def started_run(**start_run: Any) -> Iterator[Any]:
    """``mlflow.start_run(**start_run)`` for the block, naming KFP's per-task run where its
    MLflow plugin made one (:func:`~components.common.tracking.parent_tags`); the run ends with
    :func:`run_status`."""
    import mlflow

    from components.common.tracking import parent_tags

    tags = {**parent_tags(mlflow.get_tracking_uri()), **(start_run.pop("tags", None) or {})}
    with stop_deferred():  # the store's writes are not cut in half (see stop_deferred)
        run = mlflow.start_run(**start_run, tags=tags)
    try:
        yield run
    except BaseException as exc:
        with stop_deferred():
            mlflow.end_run(run_status(exc))
        raise
    with stop_deferred():
        mlflow.end_run(run_status(None))


def run_main(prog: str, main: Callable[[], int]) -> int:
    """``main()`` with SIGTERM, SIGINT and SIGHUP raising :class:`Stopped` (its children stopped
    first), so what it has open ends as stopped; then one line and the status 128+N, no
    traceback."""
    try:
        with stop_tree_on_signals():
            return main()
    except Stopped as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return signal_exit(exc.signum)
