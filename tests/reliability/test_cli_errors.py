"""Every CLI, given a bad path, value or name: a non-zero exit, one ``<prog>: error ...`` line
last on stderr that names the offending thing, and no traceback.

Most cases call the module's ``main(argv)`` in-process (fast); three run as real processes to
prove the exit status and the absence of a traceback at process level, including torchrun's.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from components.common.cli import Exit
from components.common.evaluation import DECISION, METRICS
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import preprocess
from tests.conftest import START, random_events, write_day
from tests.evaluations import forced_evaluation

ROOT = Path(__file__).resolve().parents[2]
CATEGORY = "CLI"


def closed_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A tiny preprocessed dataset (3 days of 150 rows): for the CLIs that must get past --data."""
    root = tmp_path_factory.mktemp("cli-data")
    rng = np.random.default_rng(0)
    for i in range(4):
        day = START + dt.timedelta(days=i)
        write_day(root / "raw", day, random_events(rng, day, 150))
    preprocess(
        PreprocessConfig(
            raw=str(root / "raw"),
            out=str(root / "data"),
            days=3,
            history_days=1,
            seq_len=4,
            item_buckets=256,
            category_buckets=32,
            user_buckets=64,
            scheduler="sync",
        )
    )
    return root / "data"


@pytest.fixture(scope="module")
def checkpoint(dataset) -> Path:
    """An untrained checkpoint saved as the trainer saves one: evaluate and register accept it."""
    from tests.checkpoints import untrained_checkpoint

    return untrained_checkpoint(dataset.parent / "candidate.pt", dataset, seed=0)


@pytest.fixture
def env(tmp_path, monkeypatch) -> SimpleNamespace:
    """Paths and URIs the cases refer to; no MLflow HTTP retries, no kube config, no KFP host."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    for name in ("KUBERNETES_SERVICE_HOST", "KFP_HOST", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    (tmp_path / "empty.json").write_text("{}")
    evaluation = forced_evaluation(tmp_path / "evaluation")
    return SimpleNamespace(
        tmp=tmp_path,
        missing=tmp_path / "missing",
        blocked=blocker / "out",
        dead=f"http://127.0.0.1:{closed_port()}",
        sqlite=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}",
        empty_json=tmp_path / "empty.json",
        metrics=evaluation / METRICS,  # as evaluate writes them: register reads them first
        decision=evaluation / DECISION,
    )


@dataclass(frozen=True)
class Case:
    """One CLI call that must fail: its argv, the error line's prefix and what it must name."""

    fault: str
    module: str
    argv: Callable[[SimpleNamespace], list[str]]
    prefix: str
    """The last stderr line starts with this (a regex)."""
    names: Callable[[SimpleNamespace], list[str]]
    """Strings the error line must contain: the offending path, value or name."""
    needs: tuple[str, ...] = ()
    """Fixtures beyond ``env``: dataset, checkpoint."""
    marks: tuple = field(default=())
    code: Exit = Exit.USAGE
    """The documented exit status (docs/development.md)."""


def s(value) -> str:
    return str(value)


ARGPARSE = r"python -m [\w.]+: error: "
CASES = [
    # -- datagen
    Case(
        "unwritable --out",
        "components.datagen",
        lambda e: [
            "--out",
            s(e.blocked),
            "--days",
            "1",
            "--events-per-day",
            "10",
            "--users",
            "5",
            "--items",
            "10",
            "--categories",
            "2",
        ],
        ARGPARSE,
        lambda e: ["a-file"],
        code=Exit.FAILED,
    ),
    Case(
        "--append-days on a folder that is no dataset",
        "components.datagen",
        lambda e: ["--out", s(e.missing), "--append-days", "1"],
        ARGPARSE,
        lambda e: [s(e.missing)],
        code=Exit.USAGE,
    ),
    # -- preprocess
    Case(
        "missing raw folder",
        "components.preprocess",
        lambda e: ["--raw", s(e.missing), "--out", s(e.tmp / "ds")],
        "preprocess: error: ",
        lambda e: [s(e.missing), "does not exist"],
        code=Exit.USAGE,
    ),
    Case(
        "unwritable --out",
        "components.preprocess",
        lambda e: [
            "--raw",
            s(e.data.parent / "raw"),
            "--out",
            s(e.blocked),
            "--days",
            "3",
            "--history-days",
            "1",
            "--scheduler",
            "sync",
        ],
        "preprocess: error: ",
        lambda e: ["a-file"],
        needs=("dataset",),
        code=Exit.FAILED,
    ),
    Case(
        "unknown scheduler",
        "components.preprocess",
        lambda e: ["--raw", s(e.missing), "--out", s(e.tmp / "ds"), "--scheduler", "bogus"],
        "preprocess: error: ",
        lambda e: ["scheduler", "'bogus'"],
        code=Exit.USAGE,
    ),
    Case(
        "impossible --end-date",
        "components.preprocess",
        lambda e: ["--raw", s(e.missing), "--out", s(e.tmp / "ds"), "--end-date", "2026-02-30"],
        ARGPARSE,
        lambda e: ["--end-date", "2026-02-30"],
        code=Exit.USAGE,
    ),
    # -- estimate
    Case(
        "missing data folder",
        "components.estimate",
        lambda e: ["--data", s(e.missing), "--out", s(e.tmp / "plan.json")],
        "estimate: error: ",
        lambda e: [s(e.missing / "meta.json")],
        code=Exit.USAGE,
    ),
    Case(
        "unknown model config",
        "components.estimate",
        lambda e: ["--data", s(e.data), "--model", "nosuch", "--out", s(e.tmp / "plan.json")],
        "estimate: error: ",
        lambda e: ["'nosuch'"],
        needs=("dataset",),
        code=Exit.USAGE,
    ),
    Case(
        "unknown hardware profile",
        "components.estimate",
        lambda e: ["--data", s(e.data), "--hardware", "tpu-9000", "--out", s(e.tmp / "plan.json")],
        "estimate: error: ",
        lambda e: ["'tpu-9000'"],
        needs=("dataset",),
        code=Exit.USAGE,
    ),
    Case(
        "unwritable --out",
        "components.estimate",
        lambda e: ["--data", s(e.data), "--out", s(e.blocked / "plan.json")],
        "estimate: error: ",
        lambda e: ["a-file"],
        needs=("dataset",),
        code=Exit.FAILED,
    ),
    # -- train (its error line carries the rank, by design)
    Case(
        "missing data folder",
        "components.train",
        lambda e: ["--data", s(e.missing), "--out", s(e.tmp / "train")],
        r"train: error \(rank 0\): ",
        lambda e: [s(e.missing / "meta.json")],
        code=Exit.USAGE,
    ),
    Case(
        "nonexistent --init-from checkpoint",
        "components.train",
        lambda e: [
            "--data",
            s(e.data),
            "--out",
            s(e.tmp / "train"),
            "--init-from",
            s(e.missing / "x.pt"),
        ],
        r"train: error \(rank 0\): ",
        lambda e: [s(e.missing / "x.pt")],
        needs=("dataset",),
        code=Exit.USAGE,
    ),
    Case(
        "missing --plan file",
        "components.train",
        lambda e: [
            "--data",
            s(e.data),
            "--out",
            s(e.tmp / "train"),
            "--plan",
            s(e.missing / "plan.json"),
        ],
        r"train: error \(rank 0\): ",
        lambda e: [s(e.missing / "plan.json")],
        needs=("dataset",),
        code=Exit.USAGE,
    ),
    # -- train.launch
    Case(
        "missing --plan file",
        "components.train.launch",
        lambda e: [
            "--data",
            s(e.missing),
            "--out",
            s(e.tmp / "train"),
            "--plan",
            s(e.missing / "p.json"),
        ],
        "launch: error: ",
        lambda e: [s(e.missing / "p.json")],
        code=Exit.USAGE,
    ),
    Case(
        "--nproc 0",
        "components.train.launch",
        lambda e: ["--data", s(e.missing), "--out", s(e.tmp / "train"), "--nproc", "0"],
        ARGPARSE,
        lambda e: ["--nproc", "0"],
        code=Exit.USAGE,
    ),
    # -- evaluate
    Case(
        "missing data folder",
        "components.evaluate",
        lambda e: [
            "--data",
            s(e.missing),
            "--checkpoint",
            s(e.missing / "c.pt"),
            "--out",
            s(e.tmp / "ev"),
        ],
        "evaluate: error: ",
        lambda e: [s(e.missing / "meta.json")],
        code=Exit.USAGE,
    ),
    Case(
        "nonexistent checkpoint",
        "components.evaluate",
        lambda e: [
            "--data",
            s(e.data),
            "--checkpoint",
            s(e.missing / "c.pt"),
            "--out",
            s(e.tmp / "ev"),
        ],
        "evaluate: error: ",
        lambda e: [s(e.missing / "c.pt"), "not found"],
        needs=("dataset",),
        code=Exit.USAGE,
    ),
    Case(
        "--min-auc out of range",
        "components.evaluate",
        lambda e: [
            "--data",
            s(e.missing),
            "--checkpoint",
            s(e.missing),
            "--out",
            s(e.tmp / "ev"),
            "--min-auc",
            "2",
        ],
        "evaluate: error: ",
        lambda e: ["min_auc", "2"],
        code=Exit.USAGE,
    ),
    Case(
        "unreachable tracking URI",
        "components.evaluate",
        lambda e: [
            "--data",
            s(e.data),
            "--checkpoint",
            s(e.ckpt),
            "--out",
            s(e.tmp / "ev"),
            "--tracking-uri",
            e.dead,
        ],
        "evaluate: error: ",
        lambda e: [e.dead.split("//")[1]],
        needs=("dataset", "checkpoint"),
        marks=(pytest.mark.integration,),
        code=Exit.FAILED,
    ),
    # -- register
    Case(
        "missing metrics file",
        "components.register",
        lambda e: [
            "--checkpoint",
            s(e.missing / "c.pt"),
            "--metrics",
            s(e.missing / "m.json"),
            "--decision",
            s(e.missing / "d.json"),
            "--tracking-uri",
            e.sqlite,
        ],
        "register: error: ",
        lambda e: [s(e.missing / "m.json")],
        code=Exit.USAGE,
    ),
    Case(
        "metrics evaluate did not write",
        "components.register",
        lambda e: [
            "--checkpoint",
            s(e.missing / "c.pt"),
            "--metrics",
            s(e.empty_json),
            "--decision",
            s(e.decision),
            "--tracking-uri",
            e.sqlite,
        ],
        "register: error: ",
        lambda e: [s(e.empty_json), "dailyrec.metrics/v1"],
        code=Exit.USAGE,
    ),
    Case(
        "nonexistent checkpoint",
        "components.register",
        lambda e: [
            "--checkpoint",
            s(e.missing / "c.pt"),
            "--metrics",
            s(e.metrics),
            "--decision",
            s(e.decision),
            "--tracking-uri",
            e.sqlite,
        ],
        "register: error: ",
        lambda e: [s(e.missing / "c.pt")],
        code=Exit.USAGE,
    ),
    Case(
        "unreachable tracking URI",
        "components.register",
        lambda e: [
            "--checkpoint",
            s(e.ckpt),
            "--metrics",
            s(e.metrics),
            "--decision",
            s(e.decision),
            "--tracking-uri",
            e.dead,
        ],
        "register: error: ",
        lambda e: [e.dead.split("//")[1]],
        needs=("dataset", "checkpoint"),
        marks=(pytest.mark.integration,),
        code=Exit.FAILED,
    ),
    # -- score / register.rollback
    Case(
        "unknown registered model",
        "components.score",
        lambda e: [
            "--model",
            "models:/nosuch@champion",
            "--raw",
            s(e.missing),
            "--date",
            "2026-03-01",
            "--out",
            s(e.missing) + ".parquet",
            "--tracking-uri",
            e.sqlite,
        ],
        "score: error: ",
        lambda e: ["nosuch"],
        marks=(pytest.mark.integration,),
        code=Exit.FAILED,
    ),
    Case(
        "no @previous version to roll back to",
        "components.register.rollback",
        lambda e: ["--model-name", "nosuch", "--tracking-uri", e.sqlite],
        "rollback: error: ",
        lambda e: ["nosuch", "@previous"],
        marks=(pytest.mark.integration,),
        code=Exit.USAGE,
    ),
    # -- pipelines.local
    Case(
        "missing --data folder",
        "pipelines.local",
        lambda e: [
            "--config",
            s(ROOT / "configs/local.json"),
            "--data",
            s(e.missing),
            "--root",
            s(e.tmp),
        ],
        "run: error: ",
        lambda e: [s(e.missing), "does not exist"],
        code=Exit.USAGE,
    ),
    Case(
        "--set without '='",
        "pipelines.local",
        lambda e: ["--config", s(ROOT / "configs/local.json"), "--set", "window_days"],
        "run: error: ",
        lambda e: ["'window_days'", "KEY=VALUE"],
        code=Exit.USAGE,
    ),
    Case(
        "--set with a value of the wrong type",
        "pipelines.local",
        lambda e: ["--config", s(ROOT / "configs/local.json"), "--set", "window_days=eleven"],
        "run: error: ",
        lambda e: ["window_days", "'eleven'"],
        code=Exit.USAGE,
    ),
    Case(
        "missing --config file",
        "pipelines.local",
        lambda e: ["--config", s(e.missing / "run.json")],
        "run: error: ",
        lambda e: [s(e.missing / "run.json")],
        code=Exit.USAGE,
    ),
    Case(
        "unwritable --root",
        "pipelines.local",
        lambda e: [
            "--config",
            s(ROOT / "configs/local.json"),
            "--data",
            s(e.data.parent / "raw"),
            "--root",
            s(e.blocked),
        ],
        "run: error: ",
        lambda e: ["a-file"],
        needs=("dataset",),
        code=Exit.FAILED,
    ),
    # -- pipelines.compile
    Case(
        "unknown --env",
        "pipelines.compile",
        lambda e: ["--env", "moon", "--out", s(e.tmp / "p.yaml")],
        "compile: error: ",
        lambda e: ["moon"],
        code=Exit.USAGE,
    ),
    Case(
        "unwritable --out",
        "pipelines.compile",
        lambda e: ["--out", s(e.blocked / "p.yaml")],
        "compile: error: ",
        lambda e: ["a-file"],
        code=Exit.FAILED,
    ),
    # -- pipelines.deploy
    Case(
        "unknown ENV",
        "pipelines.deploy",
        lambda e: ["--env", "moon", "--registry", "r.example/x", "--dry-run"],
        "deploy: error: ",
        lambda e: ["ENV=moon"],
        code=Exit.USAGE,
    ),
    Case(
        "no REGISTRY",
        "pipelines.deploy",
        lambda e: ["--env", "local", "--dry-run"],
        "deploy: error: ",
        lambda e: ["REGISTRY"],
        code=Exit.USAGE,
    ),
    Case(
        "bad --schedule",
        "pipelines.deploy",
        lambda e: [
            "--env",
            "local",
            "--registry",
            "r.example/x",
            "--dry-run",
            "--schedule",
            "daily",
        ],
        "deploy: error: ",
        lambda e: ["'daily'"],
        code=Exit.USAGE,
    ),
    Case(
        "unwritable --out (dry run)",
        "pipelines.deploy",
        lambda e: [
            "--env",
            "local",
            "--registry",
            "r.example/x",
            "--dry-run",
            "--out",
            s(e.blocked),
        ],
        "deploy: error: ",
        lambda e: ["a-file"],
        code=Exit.FAILED,
    ),
    Case(
        "trigger without KFP_HOST",
        "pipelines.deploy",
        lambda e: ["trigger"],
        "deploy: error: ",
        lambda e: ["KFP_HOST"],
        code=Exit.USAGE,
    ),
    Case(
        "trigger --set without '='",
        "pipelines.deploy",
        lambda e: ["trigger", "--host", e.dead, "--set", "window_days"],
        "deploy: error: ",
        lambda e: ["'window_days'", "KEY=VALUE"],
        code=Exit.USAGE,
    ),
    Case(
        "trigger on an unreachable KFP API",
        "pipelines.deploy",
        lambda e: ["trigger", "--host", e.dead],
        "deploy: error: ",
        lambda e: [e.dead],
        marks=(pytest.mark.filterwarnings("ignore:This client only works:FutureWarning"),),
        code=Exit.FAILED,
    ),
]


def cli_main(module: str) -> Callable[[list[str]], int]:
    """The module's ``main``: ``pkg.__main__`` for ``python -m pkg``."""
    mod = importlib.import_module(module)
    if not hasattr(mod, "main"):
        mod = importlib.import_module(f"{module}.__main__")
    return mod.main


def check_error_output(code, err: str, prefix: str, names: list[str]) -> str:
    """The contract; returns the error line."""
    assert code not in (0, None), f"exit status {code!r} on failure; stderr: {err[-2000:]}"
    assert "Traceback" not in err, err[-4000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    last = lines[-1]
    assert re.match(prefix, last), f"last stderr line {last!r} does not start with {prefix!r}"
    for name in names:
        assert name in last, f"{name!r} not named in {last!r}"
    return last


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=f"{c.module}: {c.fault}", marks=c.marks) for c in CASES]
)
def test_cli_fails_with_one_line_naming_the_problem(case: Case, env, request, capsys, fault_report):
    if "dataset" in case.needs:
        env.data = request.getfixturevalue("dataset")
    if "checkpoint" in case.needs:
        env.ckpt = request.getfixturevalue("checkpoint")
    argv = case.argv(env)
    capsys.readouterr()  # fixture output is not the CLI's
    try:
        code = cli_main(case.module)(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    check_error_output(code, err, case.prefix, case.names(env))
    assert code == case.code, f"exit {code}, documented {case.code!r}"
    fault_report(
        CATEGORY, f"{case.module}: {case.fault}", f"exit {code}, one line naming it, no traceback"
    )


# -- real processes -----------------------------------------------------------------------


def run_cli(module: str, *args: str, env: dict | None = None, timeout: int = 120):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_process_preprocess_unwritable_out(dataset, env, fault_report):
    """Was a FileNotFoundError/NotADirectoryError traceback."""
    done = run_cli(
        "components.preprocess",
        "--raw",
        s(dataset.parent / "raw"),
        "--out",
        s(env.blocked),
        "--days",
        "3",
        "--history-days",
        "1",
        "--scheduler",
        "sync",
    )
    check_error_output(done.returncode, done.stderr, "preprocess: error: ", ["a-file"])
    assert done.returncode == Exit.FAILED
    fault_report(
        CATEGORY,
        "python -m components.preprocess: unwritable --out (process)",
        f"exit {done.returncode}, one line, no traceback",
    )


@pytest.mark.integration
def test_process_launch_failed_rank_leaves_no_torchrun_traceback(env, fault_report):
    """torchrun printed a ChildFailedError traceback above the launcher's one-line reason."""
    done = run_cli(
        "components.train.launch",
        "--data",
        s(env.missing),
        "--out",
        s(env.tmp / "train"),
        "--nproc",
        "1",
        timeout=300,
    )
    last = check_error_output(
        done.returncode,
        done.stderr,
        "launch: error: training failed: rank 0: ",
        [s(env.missing / "meta.json")],
    )
    assert "DatasetError" in last and done.returncode == Exit.FAILED
    fault_report(
        CATEGORY,
        "python -m components.train.launch: a rank fails (process, torchrun)",
        f"exit {done.returncode}, the rank's error in one line, no torchrun traceback",
    )


@pytest.mark.integration
def test_process_rollback_unreachable_tracking(env, fault_report):
    done = run_cli(
        "components.register.rollback",
        "--tracking-uri",
        env.dead,
        env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"},
    )
    check_error_output(
        done.returncode,
        done.stderr,
        "rollback: error: ",
        [env.dead.split("//")[1], "unusable after 3 attempts"],
    )
    assert done.returncode == Exit.FAILED
    fault_report(
        CATEGORY,
        "python -m components.register.rollback: unreachable tracking URI (process)",
        f"exit {done.returncode}, one line naming the URI, no traceback",
    )
