"""A local run told to stop (SIGTERM / SIGINT) stops its whole process tree; a full disk is named
with stage and path and never retried. Real processes and signals; the full disk is simulated in
the trainer's own process (``os.fsync`` answering ENOSPC, as NFS does when the server is full)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from components.common.cli import Exit, exit_for
from components.common.run_summary import RunSummary
from components.common.storage import NoSpaceError, atomic_write_bytes, disk_full_as
from tests.reliability.waiting import trainer_processes, wait_for
from tests.small_run import local_run, small_world

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def assert_all_gone(pids: list[int], timeout: float) -> float:
    started = time.monotonic()

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # gone between listing and looking
            return False

    wait_for(lambda: not [p for p in pids if alive(p)], timeout, f"processes {pids} to end")
    return time.monotonic() - started


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_descendant(tmp_path, signum, fault_report):
    # a shell task whose children are a sleeping shell job and a Python process ignoring SIGTERM
    code = (
        "import subprocess, sys\n"
        "from components.common.proctree import Stopped, stop_tree_on_signals\n"
        "try:\n"
        "    with stop_tree_on_signals(grace_s=2):\n"
        "        subprocess.run(['sh', '-c', 'sleep 300 & "
        + sys.executable
        + ' -c "import signal, time; '
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)\" & wait'])\n"
        "except Stopped as exc:\n"
        "    print(exc, flush=True)\n"
        "    sys.exit(128 + exc.signum)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, text=True
    )
    tree = wait_for(
        lambda: (lambda c: c if len(c) >= 3 else None)(
            psutil.Process(proc.pid).children(recursive=True)
        ),
        30,
        "the task tree",
    )
    time.sleep(0.5)  # the stubborn child has set its handler
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 128 + signum
    seconds = assert_all_gone([p.pid for p in tree], 10)
    assert f"stopped by {signal.Signals(signum).name}" in proc.stdout.read()
    fault_report(
        "interrupts",
        f"{signal.Signals(signum).name} to a process whose task tree ignores SIGTERM",
        f"every descendant gone {seconds:.1f}s later (SIGTERM, 2 s grace, then SIGKILL)",
    )


@pytest.mark.slow
@pytest.mark.integration
def test_sigterm_to_make_run_stops_torchrun_and_its_workers(tmp_path, fault_report):
    raw = small_world(tmp_path / "raw")
    proc = subprocess.Popen(
        local_run(
            raw, tmp_path / "store", run_id="r1", window_days=4, history_days=1, max_epochs=50
        ),
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        workers = wait_for(lambda: trainer_processes(proc.pid), 300, "training workers")
        wait_for(lambda: running_mlflow_runs(tmp_path / "store"), 120, "the training run in MLflow")
        tree = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        seconds = assert_all_gone([p.pid for p in tree], 15)
    finally:
        for child in psutil.Process().children(recursive=True):
            child.kill()
    summary = json.loads((tmp_path / "store" / "runs" / "r1" / "summary.json").read_text())
    assert summary["status"] == "CANCELED" and "SIGTERM" in summary["error"]
    assert "stopped by SIGTERM" in proc.stderr.read()
    assert (
        json.loads((tmp_path / "store" / "runs" / ".lock").read_text() or "{}") == {}
    )  # lock released
    assert running_mlflow_runs(tmp_path / "store") == []
    assert mlflow_statuses(tmp_path / "store") == ["KILLED"]  # the training run, ended by its rank
    fault_report(
        "interrupts",
        f"SIGTERM to python -m pipelines.local during training ({len(workers)} ranks)",
        f"runner, task shell, torchrun and ranks all gone {seconds:.1f}s later; summary CANCELED; "
        "lock released; the MLflow training run KILLED",
    )


def test_full_disk_is_named_with_stage_and_path(tmp_path, monkeypatch, fault_report):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "runs" / "r1" / "plan.json"
    message = rf"^estimate: no space left on '{target}' \(\d+ MiB free there now\); free some space and rerun$"
    with pytest.raises(NoSpaceError, match=message), disk_full_as("estimate", target):
        atomic_write_bytes(target, b"{}")
    assert not list(target.parent.iterdir())  # no temp left behind
    # numpy on a full disk says "OSError: N requested and M written", without an errno
    array = tmp_path / "x.npy"
    with (
        pytest.raises(NoSpaceError, match=rf"^preprocess: no space left on '{array}'"),
        disk_full_as("preprocess", array),
    ):
        raise OSError("10800 requested and 7136 written")
    # other errors pass unchanged
    with pytest.raises(PermissionError, match="denied"), disk_full_as("preprocess", array):
        raise PermissionError(errno.EACCES, "denied")
    np.save(tmp_path / "ok.npy", np.zeros(3))
    fault_report(
        "interrupts",
        "a full disk while writing (ENOSPC at fsync; numpy's errno-less short write)",
        "one line: '<stage>: no space left on <path> (N MiB free)'; no temp file left",
    )


SITE = """\
import errno, os
_fsync = os.fsync
def fsync(fd):
    if os.readlink(f"/proc/self/fd/{fd}").startswith(os.environ["DAILYREC_TEST_FULL_DIR"]):
        raise OSError(errno.ENOSPC, "No space left on device")
    return _fsync(fd)
os.fsync = fsync
"""


@pytest.mark.slow
@pytest.mark.integration
def test_training_on_a_full_disk_is_not_restarted(tiny_dataset, tmp_path, fault_report):
    from components.common.plan import TrainPlan, write_plan
    from components.train.launch import LaunchError, LaunchSpec, LocalTorchrun
    from components.train.torchrun import rank_errors

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITE)
    out = tmp_path / "train"
    plan = write_plan(
        tmp_path / "plan.json",
        TrainPlan(model="debug", micro_batch=256, num_workers=0, max_epochs=2, eval_batch=4096),
    )
    spec = LaunchSpec.of(
        data=str(tiny_dataset), out=str(out), plan=str(plan), max_restarts=3, nproc=1
    )
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}", "DAILYREC_TEST_FULL_DIR": str(out)}
    started = time.monotonic()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with pytest.raises(
            LaunchError, match=rf"rank 0: train: no space left on '{out}/.*'"
        ) as caught:
            LocalTorchrun().run(spec)
        assert exit_for(caught.value) == Exit.NO_SPACE  # python -m components.train.launch: 28
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    logs = tmp_path / "torchrun-logs"  # the ranks' error files (torch's record), off the full disk
    proc = subprocess.run(
        LocalTorchrun().command(spec, str(logs)),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    (report,) = rank_errors(logs)
    assert report["retryable"] is False and report["attempt"] == 0  # not restarted
    assert report["error"].startswith(f"train: no space left on '{out}")
    assert (
        proc.returncode == 28
        and "torchrun: stopped without restarting: rank 0: train: no space left" in proc.stderr
    )
    assert "Traceback" not in proc.stderr.split("train: error")[-1]
    fault_report(
        "interrupts",
        "training on a full disk, torchrun allowed 3 restarts",
        f"stopped after the first attempt ({time.monotonic() - started:.0f}s, restart_count 0), "
        "'train: no space left on <path>', exit 28",
    )


def mlflow_statuses(store: Path) -> list[str]:
    """The status of each run in the root's registry (none while it is being created)."""
    import sqlite3

    db = store / "runs" / "mlflow.db"
    try:
        with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as conn:
            return [s for (s,) in conn.execute("select status from runs order by start_time")]
    except sqlite3.Error:
        return []


def running_mlflow_runs(store: Path) -> list[str]:
    """The runs the root's registry has RUNNING (none while it is being created)."""
    return [s for s in mlflow_statuses(store) if s == "RUNNING"]


@pytest.mark.slow
@pytest.mark.integration
def test_the_next_run_closes_what_a_killed_run_left_open(tmp_path, fault_report):
    raw, store = small_world(tmp_path / "raw"), tmp_path / "store"
    proc = subprocess.Popen(
        local_run(raw, store, run_id="killed", window_days=4, history_days=1, max_epochs=50),
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:  # kill -9 of the runner and the ranks while training (the OOM killer, a lost node): no
        # handler runs, the exit handler never starts, no rank ends its MLflow run
        wait_for(lambda: trainer_processes(proc.pid), 300, "training workers")
        wait_for(lambda: running_mlflow_runs(store), 120, "the training run in MLflow")
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        for rank in trainer_processes(proc.pid):
            with contextlib.suppress(psutil.Error):
                if "RANK" in rank.environ():  # not torchrun's agent: the watchdog stops it
                    rank.kill()
        proc.kill()
        proc.wait(timeout=60)
        assert_all_gone(tree, 30)  # the orphan watchdog stopped the task tree
    finally:
        for child in psutil.Process().children(recursive=True):
            child.kill()
    assert not (store / "runs" / "killed" / "summary.json").exists()
    # the next start (here one that fails at once on an empty day) finds and closes it, and says so
    empty = tmp_path / "empty"
    (empty / "dt=2026-01-01").mkdir(parents=True)
    after = subprocess.run(
        local_run(empty, store, run_id="next", window_days=4, history_days=1),
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    left = json.loads((store / "runs" / "killed" / "summary.json").read_text())
    assert left["status"] == "FAILED" and left["failed_stage"] == "train", left
    assert "killed" in left["error"] and "closed by run next" in left["error"]
    assert left["dataset_rows"]["train"] > 0  # what it had done: from its run record and stages
    assert left["stage_seconds"]["preprocess"] > 0 and left["format"] == RunSummary.FORMAT
    assert "run killed ended without a summary (killed in train): recorded FAILED" in after.stdout
    assert "was left RUNNING by a killed run: ended KILLED" in after.stdout
    assert running_mlflow_runs(store) == []
    fault_report(
        "interrupts",
        "kill -9 of make run and its ranks during training (no handler, no exit handler), "
        "then the next run",
        "the next run records the dead run FAILED in its stage and ends its MLflow runs KILLED, "
        "saying so",
    )


def _cut_registry_write(runs: Path) -> tuple[Path, str]:
    """A local registry with a run RUNNING, and a write to it cut by SIGKILL mid-transaction
    (a hot journal beside it): the database and the run's id."""
    from mlflow import MlflowClient

    from components.common.tracking import sqlite_uri

    runs.mkdir()
    client = MlflowClient(sqlite_uri(runs))
    run = client.create_run(client.create_experiment("dailyrec-train"), run_name="train-day")
    db = runs / "mlflow.db"
    writer = (  # a write transaction big enough to spill into the file, then SIGKILL
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('pragma cache_size=2')\n"
        "c.execute('begin immediate')\n"
        "c.execute(\"update runs set status = 'FINISHED'\")\n"
        "c.execute('create table spill (x text)')\n"
        "c.executemany('insert into spill values (?)', [('x' * 200,)] * 20000)\n"
        "print('mid-write', flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", writer, str(db)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"mid-write"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert (runs / "mlflow.db-journal").is_file()
    return db, run.info.run_id


@pytest.mark.integration
def test_a_registry_write_cut_by_sigkill_does_not_hide_the_open_run(tmp_path, fault_report):
    """A rank killed in the middle of an MLflow write leaves the SQLite registry with a hot journal:
    a read-only look finds nothing there; the next run's start still ends the open run KILLED."""
    import sqlite3

    from mlflow import MlflowClient

    from components.common.tracking import sqlite_uri
    from pipelines.local import close_dead_runs

    runs = tmp_path / "runs"
    db, run_id = _cut_registry_write(runs)
    client = MlflowClient(sqlite_uri(runs))
    reader = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    with contextlib.closing(reader), pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.execute("select status from runs").fetchall()  # the trap a read-only look meets
    said = close_dead_runs(tmp_path, "next", "")
    assert said == [
        "MLflow run train-day (dailyrec-train) was left RUNNING by a killed run: ended KILLED"
    ]
    assert client.get_run(run_id).info.status == "KILLED"
    fault_report(
        "interrupts",
        "a rank killed by SIGKILL in the middle of an MLflow write (SQLite registry, hot journal)",
        "the next run's start rolls the write back and ends the open MLflow run KILLED "
        "(a read-only look would fail on the journal and find nothing)",
    )


@pytest.mark.integration
def test_a_reader_meeting_a_cut_write_says_how_to_recover_and_the_tool_recovers(
    tmp_path, fault_report
):
    """Serving and scoring look the registry up read-only: after a killed write and before any
    run they refuse naming the cut write and the command that rolls it back, which does."""
    from components.common.registry_read import connect_readonly
    from components.common.tracking import TrackingError, sqlite_uri

    db, run_id = _cut_registry_write(tmp_path / "runs")
    with pytest.raises(TrackingError) as refused:
        connect_readonly(sqlite_uri(db.parent))
    command = f"python -m components.common.tracking {db}"
    assert "a write to it was cut by a kill" in str(refused.value)
    assert f"`{command}`" in str(refused.value)
    done = subprocess.run(
        [sys.executable, "-m", "components.common.tracking", str(db)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"{db}: rolled back a write a kill had cut short" in done.stdout
    assert not (db.parent / "mlflow.db-journal").exists()
    client = connect_readonly(sqlite_uri(db.parent))
    assert client.get_run(run_id).info.status == "RUNNING"  # the cut write is gone whole
    fault_report(
        "interrupts",
        "a read-only reader (make serve, scoring) meets a registry write cut by SIGKILL",
        "refused in one line naming the cut write and `python -m components.common.tracking DB`, "
        "which rolls the write back; the registry then reads as before the write",
    )
