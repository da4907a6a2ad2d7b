"""What a person watching training sees: progress lines with the epoch's and the run's ETA."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from components.common.monitoring import TrainingMetrics
from components.common.plan import TrainPlan
from components.common.progress import PROGRESS, get_logger
from components.train.runtime import Runtime
from components.train.trainjob_status import TrainJobStatus

log = get_logger(__name__)


def process_seconds(train_started: float) -> float:
    """Wall seconds of this training: since the process started (interpreter start-up and imports
    included) when it was launched to train (torchrun, ``python -m components.train``), else since
    ``train_started`` (a ``time.time()``; train() called inside a longer-lived process)."""
    import psutil

    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    launched = (
        "TORCHELASTIC_RUN_ID" in os.environ
        or getattr(main_spec, "name", "") == "components.train.__main__"
    )
    start = psutil.Process(os.getpid()).create_time() if launched else train_started
    return time.time() - start


def duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``42s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )


class Progress:
    """Rank 0's progress lines inside an epoch, every ``plan.progress_seconds`` (0 = none).

    A line: ``epoch 2/4  step 120/480 (25%)  3,950 samples/s  loss 0.2712  ETA epoch 1m32s,
    run <= 6m10s``. The run's ETA assumes every remaining epoch runs (early stopping may end
    sooner) at this epoch's pace plus the last validation's seconds.
    """

    def __init__(
        self,
        plan: TrainPlan,
        runtime: Runtime,
        clock: Callable[[], float] = time.perf_counter,
        monitor: TrainingMetrics | None = None,
        status: TrainJobStatus | None = None,
        planned_epoch_s: float | None = None,
    ) -> None:
        self.every = plan.progress_seconds if runtime.is_main else 0.0
        self.monitor = monitor
        self.status = status if status is not None and status.enabled else None
        self.planned_epoch_s = planned_epoch_s
        """The estimate's seconds per epoch: the ETA until this run's own pace is measured."""
        self.max_epochs = plan.max_epochs
        self.clock = clock
        self.validation_seconds = 0.0
        self._start = self._last = 0.0
        self._first_step = 0

    def start(self, first_step: int) -> None:
        self._start = self._last = self.clock()
        self._first_step = first_step

    def remaining(self, epoch: int, step: int, total: int, now: float) -> float | None:
        """Seconds left if every planned epoch runs: this epoch's measured pace (plus the last
        validation) once a step is measured, the plan's epoch seconds before."""
        done = step - self._first_step
        if done <= 0:
            if self.planned_epoch_s is None:
                return None
            return (self.max_epochs - epoch - step / max(total, 1)) * self.planned_epoch_s
        per_step = max(now - self._start, 1e-9) / done
        epoch_left = (total - step) * per_step
        return (
            epoch_left
            + self.validation_seconds
            + (self.max_epochs - epoch - 1) * (total * per_step + self.validation_seconds)
        )

    def report(self, epoch: int, step: int, total: int, force: bool = False, **metrics) -> None:
        """The run's progress to the TrainJob's status (throttled there; a no-op without it)."""
        if self.status is None:
            return
        self.status.update(
            (epoch + step / max(total, 1)) / self.max_epochs,
            self.remaining(epoch, step, total, self.clock()),
            force=force,
            epoch=epoch + 1,
            **metrics,
        )

    def step(self, epoch: int, step: int, total: int, samples: float, loss: float) -> None:
        """After optimizer step ``step`` (1-based) of ``total``; ``samples`` since start()."""
        if self.status is not None:
            self.report(epoch, step, total, loss=loss)
        if not self.every:
            return
        now = self.clock()
        if now - self._last < self.every or step >= total:
            return
        self._last = now
        elapsed = max(now - self._start, 1e-9)
        per_step = elapsed / max(step - self._first_step, 1)
        epoch_left = (total - step) * per_step
        run_left = (
            epoch_left
            + self.validation_seconds
            + (self.max_epochs - epoch - 1) * (total * per_step + self.validation_seconds)
        )
        log.log(
            PROGRESS,
            "epoch %d/%d  step %d/%d (%.0f%%)  %s samples/s  loss %.4f  ETA epoch %s, run <= %s",
            epoch + 1,
            self.max_epochs,
            step,
            total,
            100 * step / total,
            f"{samples / elapsed:,.0f}",
            loss,
            duration(epoch_left),
            duration(run_left),
        )
        if self.monitor:
            self.monitor.set(
                samples_per_second=samples / elapsed,
                loss=loss,
                epoch=epoch + 1,
                progress_ratio=(epoch + step / total) / self.max_epochs,
            )
