"""One exit-status convention for every CLI (``components.common.cli.Exit``): documented once, used
everywhere, and what real processes return for bad input."""

from __future__ import annotations

import ast
import errno
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.common.cli import EXIT_EPILOG, Exit, exit_for, signal_exit
from components.common.storage import NoSpaceError
from components.common.tracking import TrackingError
from components.preprocess.errors import InputError
from components.train.backend import LaunchError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "development.md"


def cli_files() -> list[Path]:
    """Every module that runs as a program (``if __name__ == "__main__"``), and images/lock.py."""
    found = [
        path
        for folder in ("components", "pipelines", "kube")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")
    ]
    return [*found, ROOT / "images" / "lock.py"]


def test_the_docs_table_lists_every_status():
    text = DOCS.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d+|128\+N) \| (.+) \|$", text, flags=re.M))
    assert set(rows) == {str(int(e)) for e in Exit} | {"128+N"}, rows
    assert rows[str(int(Exit.USAGE))].startswith("Bad input")
    assert "could not finish" in rows[str(int(Exit.FAILED))]
    for status in rows:  # and so does every --help
        assert re.search(rf"\b{re.escape(status)} ", EXIT_EPILOG), status


def test_errors_map_to_statuses():
    assert exit_for(InputError("raw.csv row 3 column label: 'x'")) is Exit.USAGE
    assert exit_for(TrackingError("sqlite:///x.db unusable")) is Exit.FAILED
    assert exit_for(PermissionError(errno.EACCES, "denied", "/out")) is Exit.FAILED
    assert exit_for(OSError(errno.ENOSPC, "No space left on device")) is Exit.NO_SPACE
    assert exit_for(NoSpaceError("/out", "preprocess")) is Exit.NO_SPACE
    assert exit_for(LaunchError("rank 0: train: no space left on /out", 28)) is Exit.NO_SPACE
    assert exit_for(LaunchError("rank 0: train: DatasetError: ...", 1)) is Exit.FAILED
    assert Exit.NO_SPACE == 28 and signal_exit(15) == 143


def forbidden_exits(path: Path) -> list[str]:
    """Integer literals a CLI exits with, outside the shared convention."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def literal(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            found += [
                f"{path.name}:{n.lineno} return {n.value.value}"
                for n in ast.walk(node)
                if isinstance(n, ast.Return) and literal(n.value)
            ]
        if isinstance(node, ast.Call) and node.args and literal(node.args[0]):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("exit", "_exit", "SystemExit"):
                found.append(f"{path.name}:{node.lineno} {name}({node.args[0].value})")
    return found


def test_the_cli_files_are_found():
    names = {str(p.relative_to(ROOT)) for p in cli_files()}
    assert {
        "components/preprocess/__main__.py",
        "components/train/torchrun.py",
        "components/common/tracking.py",
        "pipelines/local.py",
        "images/lock.py",
    } <= names


@pytest.mark.parametrize("path", cli_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_clis_exit_only_through_the_convention(path):
    assert forbidden_exits(path) == []
    text = path.read_text(encoding="utf-8")
    if "add_argument(" in text:  # it parses its own arguments
        assert "cli_parser(" in text and "ArgumentParser(" not in text, "--help would not list Exit"


def test_the_static_check_catches_a_literal_exit(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sys\ndef main():\n    if 1:\n        return 2\n    return Exit.OK\n"
        "def other():\n    return 3\nsys.exit(4)\nraise SystemExit(5)\n"
    )
    assert forbidden_exits(bad) == [
        "bad.py:4 return 2",
        "bad.py:8 exit(4)",
        "bad.py:9 SystemExit(5)",
    ]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_processes_exit_with_the_documented_status(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cases = [  # (argv, status, what the one error line names)
        (["-m", "pipelines.compile", "--env", "moon"], Exit.USAGE, "moon"),
        (["-m", "pipelines.compile", "--out", str(blocker / "p.yaml")], Exit.FAILED, "a-file"),
        (["-m", "components.datagen", "--days", "1"], Exit.USAGE, "--out"),  # argparse
        (["-m", "components.common.tracking", str(blocker / "x.db")], Exit.FAILED, "a-file"),
    ]
    for argv, status, named in cases:
        done = run(*argv)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == status, (argv, done.returncode, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and named in lines[-1], (argv, lines)
    shown = " ".join(run("-m", "components.evaluate", "--help").stdout.split())
    assert EXIT_EPILOG in shown
