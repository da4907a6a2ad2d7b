"""Whoever takes the storage root's lock cannot declare a live run dead: the lock is the file at
its path (not one removed or replaced since it was opened), a run is closed as killed only once
the very process recorded as driving it is gone, and the lock's token never appears where other
users can read it (a command line)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from components.common.lock import LockBusy, lock_path, storage_lock
from components.common.runs import DRIVER, GONE, RUNNING, driver_state, record_driver

ROOT = Path(__file__).resolve().parents[2]
CATEGORY = "concurrency"


def _folder(root: Path, name: str) -> Path:
    """A run folder left without a summary, with its run record (what close_dead_runs looks at)."""
    from components.common.run_record import RUN_RECORD

    folder = root / "runs" / name
    folder.mkdir(parents=True)
    (folder / RUN_RECORD).write_text("{}")
    return folder


def test_a_lock_file_removed_under_a_live_run_does_not_let_a_second_run_start(
    tmp_path, fault_report
):
    from pipelines.local import close_dead_runs

    live = _folder(tmp_path, "live")
    record_driver(live)  # this process drives "live"
    with storage_lock(tmp_path, "live", stage="local run"):
        lock_path(tmp_path).unlink()  # rm runs/.lock
        env = {k: v for k, v in os.environ.items() if k != "DAILYREC_LOCK_TOKEN"}
        code = (
            "import sys; from pathlib import Path\n"
            "from components.common.lock import storage_lock\n"
            "from pipelines.local import close_dead_runs\n"
            "root = Path(sys.argv[1])\n"
            "with storage_lock(root, 'second', stage='local run'):\n"
            "    close_dead_runs(root, 'second', '')\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode != 0
    said = done.stderr.strip().splitlines()[-1]
    assert f"LockBusy: run live is still running here (pid {os.getpid()})" in said
    assert not (live / "summary.json").exists()  # not declared dead
    with pytest.raises(LockBusy, match="run live is still running here"):
        close_dead_runs(tmp_path, "third", "")
    fault_report(
        CATEGORY,
        "runs/.lock removed under a live run, then a second run starts",
        "the second run finds the live run's driver process (pid and start time recorded in its "
        "folder) and refuses to start; the live run is not declared dead, its MLflow runs not ended",
    )


def test_a_run_is_declared_dead_only_when_its_own_process_is_gone(tmp_path, fault_report):
    from pipelines.local import close_dead_runs

    folder = _folder(tmp_path, "killed")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(proc.pid).create_time()
        driver = {"pid": proc.pid, "host": socket.gethostname(), "started": started}
        (folder / DRIVER).write_text(json.dumps(driver))
        assert driver_state(folder) == RUNNING
        # another process that reuses the pid later is not the run's: another start time
        (folder / DRIVER).write_text(json.dumps({**driver, "started": started - 3600}))
        assert driver_state(folder) == GONE
        (folder / DRIVER).write_text(json.dumps(driver))
    finally:
        proc.kill()
        proc.wait()
    assert driver_state(folder) == GONE
    (folder / "kfp" / "tmp" / "tmpabc").mkdir(parents=True)  # its tasks' temp files
    said = close_dead_runs(tmp_path, "next", "")
    assert not (folder / "kfp" / "tmp").exists()
    assert said == ["run killed ended without a summary (killed in preprocess): recorded FAILED"]
    fault_report(
        CATEGORY,
        "a run folder without a summary: its recorded driver process alive, then gone",
        "declared dead (summary FAILED) only once the process recorded in the folder, by pid "
        "and start time, is gone",
    )


def test_a_lock_file_replaced_while_waiting_is_not_taken(tmp_path):
    path = lock_path(tmp_path)
    with storage_lock(tmp_path, "first"):
        pass
    fd = os.open(path, os.O_RDWR)
    try:
        path.unlink()
        from components.common.lock import _is_the_lock_file

        assert not _is_the_lock_file(fd, path)
    finally:
        os.close(fd)
    with storage_lock(tmp_path, "second") as held:
        assert held["run_id"] == "second" and path.is_file()


def test_the_watchdog_gets_the_lock_token_on_stdin_never_on_its_command_line(
    tmp_path, fault_report
):
    from components.common.proctree import orphan_watchdog

    token = "t0ken-" + os.urandom(8).hex()
    with orphan_watchdog(token) as dog:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cmdline = " ".join(psutil.Process(dog.pid).cmdline())
            if "components.common.proctree" in cmdline:
                break
            time.sleep(0.05)
        assert "components.common.proctree" in cmdline and token not in cmdline
        assert token not in psutil.Process(dog.pid).environ().values()
        assert dog.poll() is None  # it read its token and waits
    fault_report(
        "security",
        "the orphan watchdog's command line (visible in ps to every user)",
        "holds only the pid it watches; the lock token reaches it on stdin",
    )
