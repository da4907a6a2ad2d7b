"""Dependencies run one way: a ``__main__`` module is an entry point (``python -m ...``), never a
library. Code that another module needs lives beside what it belongs to, not in a CLI."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("components", "pipelines", "kube")


def main_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a ``__main__`` module in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = (
                [base]
                if "__main__" in base.split(".")
                else [f"{base}.{a.name}" for a in node.names]
            )
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names = [str(node.args[0].value)]
        else:
            continue
        found += [(node.lineno, n) for n in names if "__main__" in n.split(".")]
    return found


def test_the_scan_finds_each_form_of_import():
    source = (
        "import components.train.__main__\n"
        "from components.tune.__main__ import build_parser\n"
        "from components.score import __main__ as score\n"
        "import importlib\nimportlib.import_module('components.x.__main__')\n"
        "from components.tune.study import tune\n"
        "if __name__ == '__main__':\n    pass\n"
    )
    assert [line for line, _ in main_imports(source)] == [1, 2, 3, 5]


def test_no_module_imports_a_main_module():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, name in main_imports(path.read_text())
    ]
    assert not offenders, "move what these need out of the CLI:\n" + "\n".join(offenders)
