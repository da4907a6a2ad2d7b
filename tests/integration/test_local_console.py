"""What a person sees during ``make run``: a short console; the full logs in the run folder."""

from __future__ import annotations

import io
import logging

import pytest
from kfp.local import logging_utils, status

from components.common.progress import LOG_FORMAT, PROGRESS, PROGRESS_LEVELS
from pipelines.console import STAGE_LINE, RunConsole


def kfp_task(name: str, streamed: list[str], ok: bool = True) -> None:
    """What kfp.local's task dispatcher prints for one task, with its own formatting helpers."""
    with logging_utils.local_logger_context():
        task = logging_utils.format_task_name(name)
        logging.info(f"Executing task {task}")
        logging.info("Streamed logs:\n")
        with logging_utils.indented_print():
            for line in streamed:
                print(line)
            print("\n")
        result = status.Status.SUCCESS if ok else status.Status.FAILURE
        message = f"Task {task} finished with status {logging_utils.format_status(result)}"
        logging.info(message) if ok else logging.error(message)
        if ok:
            logging.info(f"Task {task} outputs:\n    data_dir: '/tmp/x'")
        logging_utils.print_horizontal_line()


EXECUTOR = [
    "[KFP Executor 2026-11-30 22:19:21,056 INFO]: Got executor_input:",
    "{",
    '    "inputs": {',
    '        "parameterValues": {"run_id": "r1"}',
    "    }",
    "}",
]


def test_console_shows_tasks_progress_and_warnings_and_files_the_rest(tmp_path):
    terminal = io.StringIO()
    clock = iter([0.0, 12.5, 20.0, 21.0])
    console = RunConsole(tmp_path / "logs", terminal, clock=lambda: next(clock))
    import contextlib

    with contextlib.redirect_stdout(console):
        kfp_task(
            "preprocess-op",
            [
                *EXECUTOR,
                "22:19:25 PROGRESS components.preprocess.stage: phase scan: started",
                "22:19:25 INFO components.preprocess.stage: sequence: 12500 staged rows",
                "22:19:25 WARNING components.preprocess.stage: not read: '_truth'",
                "W1130 22:19:40.186000 22258 torch/distributed/run.py:874] *****",
                "W1130 22:19:40.186000 22258 torch/distributed/run.py:874] worker restarted",
                "/x/mlflow/utils.py:187: UserWarning: Add type hints",
                "  color_warning(",
                "dataset 2026-01-02 .. 2026-01-05 (fingerprint 72459bd93106)",
            ],
        )
        kfp_task(
            "train-op",
            [
                *EXECUTOR,
                "Traceback (most recent call last):",
                '  File "x.py", line 1',
                "components.train.launch.LaunchError: training failed: rank 0: train: no space",
            ],
            ok=False,
        )
    console.close()
    shown = [
        line.split(None, 1)[1] for line in terminal.getvalue().splitlines()
    ]  # without the clock
    assert [" ".join(line.split()) for line in shown] == [
        "preprocess started",
        "preprocess phase scan: started",
        "preprocess warning: not read: '_truth'",
        "preprocess warning: worker restarted",
        "preprocess UserWarning: Add type hints",
        "preprocess done in 12.5s",
        "train started",
        "train FAILED after 1.0s: components.train.launch.LaunchError: training failed: rank 0: train: no space "
        f"(log: {tmp_path / 'logs' / 'train-op.log'})",
    ]
    # everything else is in the files: the task's own lines, the executor JSON, KFP's outputs
    task_log = (tmp_path / "logs" / "preprocess-op.log").read_text()
    assert (
        '"parameterValues": {"run_id": "r1"}' in task_log
        and "sequence: 12500 staged rows" in task_log
    )
    assert "data_dir: '/tmp/x'" in task_log and "\x1b[" not in task_log
    transcript = (tmp_path / "logs" / "pipeline.log").read_text()
    assert (
        "Executing task 'preprocess-op'" in transcript and "Executing task 'train-op'" in transcript
    )
    assert "Traceback" in (tmp_path / "logs" / "train-op.log").read_text()


def test_the_stages_progress_lines_are_what_the_console_shows():
    """The stages' log format (components.common.progress) and the console's reading of it agree."""
    handler = logging.Formatter(LOG_FORMAT, "%H:%M:%S")  # what get_logger's handler uses
    shown = []
    for level in (logging.INFO, PROGRESS, logging.WARNING):
        record = logging.LogRecord(
            "components.x", level, __file__, 1, "epoch 1/3  ETA epoch 20s", None, None
        )
        match = STAGE_LINE.match(handler.format(record))
        assert match and match["message"] == "epoch 1/3  ETA epoch 20s"
        shown.append(match["level"] in PROGRESS_LEVELS)
    assert shown == [False, True, True]


@pytest.mark.integration
def test_verbose_leaves_kfps_output_on_the_terminal(tmp_path, capsys):
    from pipelines.local import quiet_console

    with quiet_console(tmp_path / "logs", verbose=True) as console:
        kfp_task("estimate-op", EXECUTOR)
    assert console is None and '"parameterValues": {"run_id": "r1"}' in capsys.readouterr().out
    with quiet_console(tmp_path / "logs") as console:
        kfp_task("estimate-op", EXECUTOR)
    out = capsys.readouterr().out
    assert isinstance(console, RunConsole) and "parameterValues" not in out and "estimate" in out
    assert "parameterValues" in (tmp_path / "logs" / "estimate-op.log").read_text()
