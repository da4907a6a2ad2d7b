"""The ranks' error files: written by torch's ``errors.record``, read by the torchrun wrapper and launcher."""

from __future__ import annotations

import subprocess
import sys

import pytest
from torch.distributed.elastic.multiprocessing.errors import record

from components.common.storage import NoSpaceError
from components.train.torchrun import fatal_failure, log_dir, rank_errors
from tests.tools import ROOT


def fail_recorded(monkeypatch, path, exc: Exception) -> None:
    """A rank's entry point failing as under torchrun (which sets $TORCHELASTIC_ERROR_FILE per rank)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))

    @record
    def rank_main() -> None:
        raise exc

    with pytest.raises(type(exc), match="."):
        rank_main()


def test_rank_errors_of_the_latest_attempt_and_a_full_disk_is_fatal(tmp_path, monkeypatch):
    run = tmp_path / "logs" / "none_abc123"
    fail_recorded(monkeypatch, run / "attempt_0" / "0" / "error.json", ValueError("first try"))
    fail_recorded(
        monkeypatch, run / "attempt_1" / "1" / "error.json", ValueError("plan.train.precision fp16")
    )
    fail_recorded(
        monkeypatch,
        run / "attempt_1" / "0" / "error.json",
        NoSpaceError(tmp_path / "best.pt", "train"),
    )
    errors = rank_errors(tmp_path / "logs")
    assert [(e["rank"], e["attempt"], e["retryable"]) for e in errors] == [
        (0, 1, False),
        (1, 1, True),
    ]
    assert errors[0]["error"].startswith(f"train: no space left on '{tmp_path / 'best.pt'}'")
    assert errors[1]["error"] == "ValueError: plan.train.precision fp16"
    assert fatal_failure(str(tmp_path / "logs")).startswith("rank 0: train: no space left on ")
    assert fatal_failure(None) is None and rank_errors(tmp_path / "nothing") == []


def test_log_dir_in_either_spelling():
    assert log_dir(["--standalone", "--log-dir", "/a", "-m", "x"]) == "/a"
    assert log_dir(["--log_dir=/b", "-m", "x"]) == "/b"
    assert log_dir(["--nproc_per_node=2", "-m", "components.train", "--out", "o"]) is None


def test_workers_thread_count_comes_from_the_plan(tmp_path):
    from components.common.plan import TrainPlan, write_plan
    from components.train.torchrun import thread_count

    plan = write_plan(tmp_path / "plan.json", TrainPlan(model="debug", cpu_threads=3))
    assert (
        thread_count(["--standalone", "-m", "components.train", "--plan", str(plan), "--out", "o"])
        == 3
    )
    (tmp_path / "bad.json").write_text("{")
    assert thread_count(["-m", "components.train", "--plan", str(tmp_path / "bad.json")]) == 1
    assert thread_count(["-m", "components.train", "--out", "o"]) == 1  # torchrun's own choice


def test_the_wrappers_status_survives_a_teardown_that_aborts():
    """28 (a full disk: do not restart) is a contract with the launcher and the TrainJob's
    podFailurePolicy; a stopped agent's teardown can abort in torch's C++ threads, so the wrapper
    ends with its status and runs nothing after it (its output flushed first)."""
    code = (
        "import atexit, os\n"
        "from components.train.torchrun import exit_now\n"
        "atexit.register(os.abort)  # a teardown that aborts, as torch's can\n"
        "print('flushed', end='')\n"
        "exit_now(28)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (28, "flushed"), done.stderr
    source = (ROOT / "components" / "train" / "torchrun.py").read_text()
    assert source.rstrip().endswith('if __name__ == "__main__":\n    exit_now(main())')
