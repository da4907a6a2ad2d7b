"""Logging and phase timing shared by the stages' CLIs."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PROGRESS = 25
"""Log level of the lines that show a long stage advancing (phases, training steps with their ETA):
between INFO and WARNING, so ``make run``'s console shows them and leaves the rest of INFO to the logs."""
logging.addLevelName(PROGRESS, "PROGRESS")
PROGRESS_LEVELS = ("PROGRESS", "WARNING", "ERROR", "CRITICAL")
"""The stages' log levels a person watching a run sees."""


def get_logger(name: str) -> logging.Logger:
    """A logger that prints to stderr once per process (idempotent setup)."""
    root = logging.getLogger("components")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, "%H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    return logging.getLogger(name)


class PhaseTimer:
    """Times named phases; ``seconds`` maps phase name to wall seconds."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.logger.log(PROGRESS, "phase %s: started", name)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[name] = round(elapsed, 3)
            self.logger.log(PROGRESS, "phase %s: %.2fs", name, elapsed)


def compute_with_progress(collections: list) -> list:
    """Compute Dask collections with a progress display that suits the active scheduler: the
    distributed client's progress where one is active, else a local progress bar that short
    computes keep quiet."""
    import dask

    try:
        from distributed import default_client, progress

        client = default_client()
    except (ImportError, ValueError):
        client = None
    if client is None:
        from dask.diagnostics import ProgressBar

        with ProgressBar(minimum=1.0, dt=0.25):
            return list(dask.compute(*collections))
    futures = client.compute(collections)
    progress(futures, notebook=False)
    return client.gather(futures)
