"""What a person sees while ``kfp.local`` runs a pipeline: a short console, full logs in files.

KFP's local runner prints everything to ``sys.stdout``: its own log lines
(task started/finished, every output artifact), and each task's subprocess
output line by line (the executor input JSON, MLflow's and torchrun's
messages, the stages' logs). :class:`RunConsole` stands in for ``sys.stdout``
during the run (``contextlib.redirect_stdout``: no change to KFP) and

* writes every line to ``<logs>/pipeline.log`` and each task's streamed lines
  to ``<logs>/<task>.log``;
* shows on the terminal one line per task start and end (with its duration),
  the stages' progress lines (level ``PROGRESS``: preprocess phases, training
  steps with their ETA), warnings and errors, and for a failed task its last
  error line and where its log is.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from components.common.progress import PROGRESS_LEVELS

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# kfp.local's own lines (logging_utils.MillisecondFormatter): "22:19:20.985 - INFO - message"
KFP_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} - (?P<level>[A-Z]+) - (?P<message>.*)$")
TASK_START = re.compile(r"^Executing task '(?P<task>[^']+)'")
TASK_END = re.compile(r"^Task '(?P<task>[^']+)' finished with status (?P<status>[A-Z]+)")
# kfp.local indents a task's streamed output by 4 spaces (logging_utils.indented_print)
STREAMED = "    "
# the stages' loggers (components.common.progress.LOG_FORMAT): "22:19:25 PROGRESS components.x: message"
STAGE_LINE = re.compile(
    r"^(?P<time>\d\d:\d\d:\d\d) (?P<level>[A-Z]+) (?P<name>[\w.]+): (?P<message>.*)$"
)
# Python warnings: "path/to/file.py:187: UserWarning: message"
PY_WARNING = re.compile(r"^\S+:\d+: (?P<category>\w*Warning): (?P<message>.*)$")
# glog-style lines of torch (torchrun's agent): "W1130 22:19:40.186000 22258 torch/distributed/run.py:874] msg"
GLOG = re.compile(r"^(?P<level>[WEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+\] (?P<message>.*)$")
# other libraries' loggers as MLflow formats them: "2026/11/30 22:19:33 WARNING mlflow.x: message"
LIB_LINE = re.compile(
    r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>WARNING|ERROR|CRITICAL) (?P<name>[\w.]+): "
    r"(?P<message>.*)$"
)
# what a failed task's last line of interest looks like: "preprocess: error: ...", "ValueError: ..."
ERROR_LINE = re.compile(r"(^\w[\w.]*(Error|Exception|Exit)\b.*:|: error\b|^error:)")


def task_label(task: str) -> str:
    """The name a person knows a task by: ``preprocess-op`` -> ``preprocess``."""
    return task.removesuffix("-op")


class RunConsole(io.TextIOBase):
    """A text stream for ``sys.stdout`` during a local run (see the module's docstring)."""

    def __init__(
        self,
        logs: Path,
        terminal: TextIO,
        clock: Callable[[], float] = time.monotonic,
        width: int = 18,
    ) -> None:
        self.logs = Path(logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.terminal = terminal
        self.clock = clock
        self.width = width
        self.transcript = open(self.logs / "pipeline.log", "a", encoding="utf-8")  # noqa: SIM115 (closed in close)
        self.task: str | None = None
        self.task_log: TextIO | None = None
        self.started = 0.0
        self.last_error: str | None = None
        self.failed: list[str] = []
        self._partial = ""
        self._lock = threading.Lock()  # kfp.local may run ParallelFor iterations in threads

    # -- the stream ---------------------------------------------------------------------------
    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            for line in lines:
                self._line(ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        if self.transcript.closed:
            return
        self.transcript.flush()
        if self.task_log:
            self.task_log.flush()
        self.terminal.flush()

    def close(self) -> None:
        if self.closed:
            return
        with self._lock:
            if self._partial:
                self._line(ANSI.sub("", self._partial))
                self._partial = ""
            self._end_task_log()
            self.transcript.close()
        super().close()

    # -- lines --------------------------------------------------------------------------------
    def show(self, text: str, task: str | None = None) -> None:
        label = task_label(task) if task else ""
        self.terminal.write(
            f"{time.strftime('%H:%M:%S')} {label:<{self.width}} {text}\n".rstrip() + "\n"
        )
        self.terminal.flush()

    def _line(self, line: str) -> None:
        self.transcript.write(line + "\n")
        kfp = KFP_LINE.match(line)
        if kfp:
            self._kfp_line(kfp["level"], kfp["message"])
        elif self.task is not None:
            streamed = line.removeprefix(STREAMED)
            if self.task_log:
                self.task_log.write(streamed + "\n")
            self._streamed(streamed)

    def _kfp_line(self, level: str, message: str) -> None:
        start, end = TASK_START.match(message), TASK_END.match(message)
        if start:
            self._end_task_log()
            self.task, self.started, self.last_error = start["task"], self.clock(), None
            self.task_log = open(self.logs / f"{self.task}.log", "w", encoding="utf-8")  # noqa: SIM115
            self.show("started", self.task)
        elif end:
            seconds = self.clock() - self.started
            if end["status"] == "SUCCESS":
                self.show(f"done in {seconds:.1f}s", end["task"])
            else:
                self.failed.append(end["task"])
                why = f": {self.last_error}" if self.last_error else ""
                self.show(
                    f"FAILED after {seconds:.1f}s{why} (log: {self.logs / (end['task'] + '.log')})",
                    end["task"],
                )
        elif message.startswith("Pipeline "):
            pass  # the run's summary says how it ended
        elif level in ("WARNING", "ERROR", "CRITICAL"):
            self.show(f"{level.lower()}: {message}", self.task)
        elif message.startswith("Skipping "):  # a condition that was false, a failed upstream task
            self.show(message[0].lower() + message[1:])

    def _streamed(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        if ERROR_LINE.search(text) and not text.startswith("[KFP Executor"):
            self.last_error = text[:300]
        stage = STAGE_LINE.match(text)
        if stage:
            level = stage["level"]
            if level in ("ERROR", "CRITICAL"):
                self.last_error = stage["message"][:300]
            if level in PROGRESS_LEVELS:
                self.show(
                    stage["message"]
                    if level == "PROGRESS"
                    else f"{level.lower()}: {stage['message']}",
                    self.task,
                )
            return
        warning = PY_WARNING.match(text) or LIB_LINE.match(text)
        if warning:
            kind = warning.groupdict().get("category") or warning["level"].lower()
            self.show(f"{kind}: {warning['message'][:300]}", self.task)
            return
        glog = GLOG.match(text)
        if glog and glog["message"].strip(" *"):
            self.show(
                f"{'warning' if glog['level'] == 'W' else 'error'}: {glog['message'][:300]}",
                self.task,
            )

    def _end_task_log(self) -> None:
        if self.task_log:
            self.task_log.close()
            self.task_log = None
