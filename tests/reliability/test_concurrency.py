"""Concurrent and interrupted runs on one storage root: the lock, other runs' temp folders, the
MLflow database's creation, and @champion moved by another run (compare-and-set). Real processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.common.lock import LockBusy, storage_lock
from components.common.storage import OWNER_SUFFIX, TMP_MARKER, atomic_dir, remove_stale_temps
from components.common.tracking import TrackingError, connect, sqlite_problem, sqlite_uri

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def started(code: str, ready: Path, timeout: float = 60) -> subprocess.Popen:
    """A Python process running ``code``, once it has created ``ready``."""
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV, cwd=ROOT)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        assert proc.poll() is None, f"helper process ended early with {proc.returncode}"
        assert time.monotonic() < deadline, "helper process never got ready"
        time.sleep(0.05)
    return proc


def test_a_live_runs_temp_folder_is_never_removed_a_dead_ones_is(tmp_path, fault_report):
    out = tmp_path / "datasets" / "2026-01-05"
    writer = started(
        "import sys, time, pathlib\n"
        "from components.common.storage import atomic_dir\n"
        f"with atomic_dir({str(out)!r}) as tmp:\n"
        "    (tmp / 'part-0.npy').write_bytes(b'x' * 100)\n"
        f"    pathlib.Path({str(tmp_path / 'ready')!r}).touch()\n"
        "    time.sleep(120)\n",
        tmp_path / "ready",
    )
    try:
        (live,) = [
            p for p in out.parent.glob(f"*{TMP_MARKER}*") if not p.name.endswith(OWNER_SUFFIX)
        ]
        assert (
            remove_stale_temps(out) == [] and (live / "part-0.npy").exists()
        )  # another run's cleanup
        with atomic_dir(out) as mine:  # another run writing the same folder meanwhile
            (mine / "x").write_text("1")
        assert (live / "part-0.npy").exists() and (out / "x").exists()
    finally:
        writer.send_signal(signal.SIGKILL)  # the writer dies: its temp is a leftover now
        writer.wait()
    assert remove_stale_temps(out) == [live] and not live.exists()
    assert not list(out.parent.glob(f"*{TMP_MARKER}*"))  # its owner file went too
    fault_report(
        "concurrency",
        "a run's cleanup meets another live run's temp folder (same dataset day)",
        "kept while its writer holds its owner lock; removed once the writer is dead",
    )


def test_second_run_is_refused_naming_the_holder_and_waits_when_asked(tmp_path, fault_report):
    holder = started(  # says its token (what its own tasks inherit) in the ready file
        "import os, time, pathlib\n"
        "from components.common.lock import storage_lock\n"
        f"with storage_lock({str(tmp_path)!r}, 'nightly-1', stage='local run'):\n"
        f"    pathlib.Path({str(tmp_path / 'ready')!r}).write_text(os.environ['DAILYREC_LOCK_TOKEN'])\n"
        "    time.sleep(120)\n",
        tmp_path / "ready",
    )
    try:
        busy = rf"another run holds the lock on .*runs/\.lock \(run nightly-1, stage local run, pid {holder.pid} on "
        with (
            pytest.raises(LockBusy, match=busy + r".*, since 20\d\d-"),
            storage_lock(tmp_path, "nightly-2"),
        ):
            pass
        # make run: refused before anything is written, with the same message
        from pipelines.local import main

        raw = tmp_path / "raw"
        raw.mkdir()
        assert (
            main(
                [
                    "--config",
                    "configs/debug.json",
                    "--data",
                    str(raw),
                    "--root",
                    str(tmp_path),
                    "--run-id",
                    "nightly-2",
                ]
            )
            == 1
        )
        assert not (tmp_path / "runs" / "nightly-2").exists()
        # a task of the holding run (its token inherited) passes at once; what anyone can read in
        # the lock file is no token: presenting it is refused
        for _ in range(100):
            token = (tmp_path / "ready").read_text()
            if token:
                break
            time.sleep(0.05)
        recorded = (tmp_path / "runs" / ".lock").read_text()
        assert token and token not in recorded

        def task(presented: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from components.common.lock import storage_lock\n"
                    f"with storage_lock({str(tmp_path)!r}, 'nightly-1', stage='register'):\n"
                    "    print('inside')",
                ],
                env={**ENV, "DAILYREC_LOCK_TOKEN": presented},
                capture_output=True,
                text=True,
                timeout=60,
            )

        child = task(token)
        assert child.stdout.strip() == "inside", child.stderr
        copied = task(json.loads(recorded)["token_sha256"])
        assert copied.returncode != 0 and "another run holds the lock" in copied.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with storage_lock(tmp_path, "nightly-2", wait_s=30) as info:  # released by the holder's death
        assert info["run_id"] == "nightly-2"
    fault_report(
        "concurrency",
        "a second run on a storage root while another holds its lock",
        "refused at once naming run, stage, pid, host and start time (make run: exit 1, nothing "
        "written); tasks of the holding run pass; a waiting task gets the lock when the holder dies",
    )
    fault_report(
        "concurrency",
        "another process copies what the lock file records and presents it as the run's token",
        "refused: the file holds only the token's SHA-256, the token lives in the holder's "
        "environment",
    )


@pytest.mark.slow
def test_the_mlflow_database_is_never_left_half_created(tmp_path, fault_report):
    code = (
        "from components.common.tracking import connect, sqlite_uri\n"
        f"connect(sqlite_uri({str(tmp_path / 'runs')!r}))\n"
    )
    db = tmp_path / "runs" / "mlflow.db"
    for delay in (0.5, 1.5, 3.0):  # SIGTERM at several points of the first creation
        proc = subprocess.Popen([sys.executable, "-c", code], env=ENV, cwd=ROOT)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        assert not db.exists() or sqlite_problem(db) is None, sqlite_problem(db)
    connect(sqlite_uri(tmp_path / "runs")).search_experiments()
    assert sqlite_problem(db) is None
    # half-created by an older version (in place, then interrupted): repaired when it holds nothing,
    # named with what to do when it holds something
    empty = tmp_path / "old-empty" / "mlflow.db"
    empty.parent.mkdir()
    with sqlite3.connect(empty) as con:
        con.execute("create table experiments (experiment_id integer primary key, name text)")
    connect(sqlite_uri(empty.parent)).search_experiments()
    assert (
        sqlite_problem(empty) is None
        and len(list(empty.parent.glob("mlflow.db.incomplete-*"))) == 1
    )
    broken = tmp_path / "old" / "mlflow.db"
    broken.parent.mkdir()
    with sqlite3.connect(broken) as con:
        con.execute("create table experiments (experiment_id integer primary key, name text)")
        con.execute("insert into experiments values (7, 'ctr-train')")
    with pytest.raises(
        TrackingError,
        match=r"old/mlflow.db: an incomplete MLflow database \(1 tables, no "
        r"schema version.*move it aside and rerun",
    ):
        connect(sqlite_uri(broken.parent))
    assert broken.exists()  # never moved when it holds something
    fault_report(
        "concurrency",
        "SIGTERM during the first run's MLflow database creation (3 moments)",
        "the database appears complete or not at all (created under a temp name, then linked); "
        "a half-created one from before is recreated when empty, else named with what to do",
    )


@pytest.mark.slow
def test_make_ui_prepares_the_registry_before_the_server_opens_it(tmp_path, fault_report):
    """``make ui`` runs ``python -m components.common.tracking DB`` first: mlflow ui would create the
    database in place, non-atomically; an interrupted empty one is repaired, a damaged one named."""
    db = tmp_path / "runs" / "mlflow.db"

    def prepare(path):
        return subprocess.run(
            [sys.executable, "-m", "components.common.tracking", str(path)],
            env=ENV,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    for delay in (0.5, 1.5):  # SIGTERM during the creation: complete or absent, never half
        proc = subprocess.Popen(
            [sys.executable, "-m", "components.common.tracking", str(db)],
            env=ENV,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        assert not db.exists() or sqlite_problem(db) is None, sqlite_problem(db)
    done = prepare(db)
    assert done.returncode == 0 and sqlite_problem(db) is None
    assert done.stdout.strip() in ("", f"created {db}")
    assert prepare(db).stdout == ""  # sound already: nothing to do, nothing said
    broken = tmp_path / "old" / "mlflow.db"
    broken.parent.mkdir()
    with sqlite3.connect(broken) as con:
        con.execute("create table runs (run_uuid text primary key)")
        con.execute("insert into runs values ('abc')")
    done = prepare(broken)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f"tracking: error: {broken}: an incomplete MLflow database (1 tables, no schema version"
    )
    fault_report(
        "concurrency",
        "make ui on an absent, interrupted or damaged local registry",
        "created atomically before the server opens it; a damaged one is named with what to do, exit 1",
    )


@pytest.mark.slow
@pytest.mark.integration
def test_champion_moved_by_another_run_is_not_overwritten(tiny_dataset, tmp_path, fault_report):
    from mlflow import MlflowClient

    from components.evaluate.decision import GateRule
    from components.evaluate.stage import EvaluateConfig, evaluate
    from components.register.config import RegisterConfig
    from components.register.stage import ChampionMoved, register
    from tests.checkpoints import untrained_checkpoint

    uri = sqlite_uri(tmp_path / "runs")
    first = untrained_checkpoint(tmp_path / "a.pt", tiny_dataset, seed=1)
    second = untrained_checkpoint(tmp_path / "b.pt", tiny_dataset, seed=2)

    def evaluated(checkpoint, name):
        evaluate(
            EvaluateConfig(
                data=str(tiny_dataset),
                checkpoint=str(checkpoint),
                out=str(tmp_path / name),
                model_name="ctr",
                tracking_uri=uri,
                rule=GateRule(min_auc=0.0),
            )
        )
        return tmp_path / name

    def registered(checkpoint, out):
        return register(
            RegisterConfig(
                checkpoint=str(checkpoint),
                metrics=str(out / "metrics.json"),
                decision=str(out / "decision.json"),
                model_name="ctr",
                tracking_uri=uri,
            )
        )

    # both runs evaluate while there is no champion; the second registers first
    out_a, out_b = evaluated(first, "eval-a"), evaluated(second, "eval-b")
    assert json.loads((out_a / "decision.json").read_text())["champion_version"] is None
    assert registered(second, out_b).champion_version == 1
    with pytest.raises(
        ChampionMoved,
        match=r"ctr@champion is v1 now, but evaluate compared the candidate "
        r"with no champion.*No alias moved",
    ):
        registered(first, out_a)
    client = MlflowClient(uri, registry_uri=uri)
    assert client.get_registered_model("ctr").aliases == {"champion": 1}
    assert (
        len(client.search_model_versions("name = 'ctr'")) == 1
    )  # nothing registered for the stale decision
    assert (
        registered(second, out_b).champion_version == 1
    )  # a re-run of the winner is still idempotent
    fault_report(
        "concurrency",
        "two runs evaluate against 'no champion'; the second registers first",
        "the first's alias move is refused (compare-and-set on @champion), nothing registered, "
        "the message says to run again",
    )


def test_lock_file_records_the_holder(tmp_path):
    with storage_lock(tmp_path, "r1", stage="preprocess") as info:
        doc = json.loads((tmp_path / "runs" / ".lock").read_text())
        assert doc["run_id"] == "r1" and doc["stage"] == "preprocess" and doc["pid"] == os.getpid()
        assert info["token"] == os.environ["DAILYREC_LOCK_TOKEN"]
    assert (tmp_path / "runs" / ".lock").read_text() == ""  # released: no stale holder to report
    assert "DAILYREC_LOCK_TOKEN" not in os.environ
