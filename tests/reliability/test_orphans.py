"""A local run killed with SIGKILL (no handler can run) leaves nothing behind: the watchdog started
with the storage lock stops every process that carries the run's lock token. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

RUN = """
import subprocess, sys, time
from components.common.lock import storage_lock
from components.common.proctree import orphan_watchdog
with storage_lock(sys.argv[1], "killed-run", stage="local run") as held, orphan_watchdog(held["token"]):
    # a task shell that started a worker, as kfp.local's subprocess runner and torchrun do
    shell = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']);"
        " time.sleep(300)"])
    print(shell.pid, flush=True)
    time.sleep(300)
"""


def descendants_of(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def test_sigkill_of_a_local_run_stops_its_tasks_and_workers(tmp_path, fault_report):
    env = {k: v for k, v in os.environ.items() if k != "DAILYREC_LOCK_TOKEN"}
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    shell = int(run.stdout.readline())
    deadline = time.monotonic() + 60
    while (
        len(descendants_of(run.pid)) < 3 and time.monotonic() < deadline
    ):  # watchdog, shell, worker
        time.sleep(0.2)
    tasks = [psutil.Process(shell), *psutil.Process(shell).children()]
    assert len(tasks) == 2
    run.send_signal(signal.SIGKILL)
    run.wait()
    gone, alive = psutil.wait_procs(tasks, timeout=30)
    for proc in alive:  # clean up before failing
        proc.kill()
    assert not alive, f"left running after SIGKILL: {[p.pid for p in alive]}"
    fault_report(
        "concurrency",
        "SIGKILL of the local run (no handler can run)",
        "its watchdog stops every task shell, torchrun and worker carrying the run's token",
    )


def test_a_normal_end_stops_the_watchdog_and_nothing_else(tmp_path):
    from components.common.lock import storage_lock
    from components.common.proctree import orphan_watchdog

    with storage_lock(tmp_path, "normal-run") as held, orphan_watchdog(held["token"]) as dog:
        assert psutil.Process(dog.pid).is_running()
        bystander = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"]
        )  # carries the token
    try:
        assert dog.poll() is not None  # ended with the block
        time.sleep(0.5)
        assert (
            bystander.poll() is None
        )  # the watchdog acts only when the run dies, not at its normal end
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("env_token, stopped", [("abc", True), ("other", False)])
def test_the_watchdog_stops_only_processes_with_the_runs_token(env_token, stopped):
    from components.common.proctree import watch

    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "DAILYREC_LOCK_TOKEN": env_token},
    )
    try:
        time.sleep(0.3)  # its environment is readable once it runs
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        assert (proc.pid in watch(gone.pid, "abc", grace_s=2)) is stopped
        assert (proc.poll() is not None) is stopped
    finally:
        proc.kill()
        proc.wait()
