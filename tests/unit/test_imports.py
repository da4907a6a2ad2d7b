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


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source``, function-level ones included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


LAYERS = {
    # package: what it may never import (first name of the module)
    "components": ("kfp", "kube", "pipelines", "benchmarks", "tests"),
    "kube": ("pipelines", "benchmarks", "tests"),
    "pipelines": ("benchmarks", "tests"),
}
"""The layers, lowest first: the stages know no orchestrator or cluster (their KFP adapters are
``pipelines/ops/``, their cluster backends are passed in); the cluster package knows no pipeline;
nothing shipped imports the benchmarks or the tests."""


def test_the_layering_scan_sees_function_level_imports():
    source = "import os\ndef f():\n    from kube.client import x\n    import kfp.dsl\n"
    assert imported_modules(source) == [(1, "os"), (3, "kube.client"), (4, "kfp.dsl")]


def test_layers_run_one_way():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for package, banned in LAYERS.items()
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, module in imported_modules(path.read_text())
        if module.split(".")[0] in banned
    ]
    assert not offenders, "a layer imports one above it:\n" + "\n".join(offenders)


STAGES = {
    # stage: the other parts of components/ it may import (common is below every stage)
    "common": (),
    "datagen": ("common",),
    "preprocess": ("common",),
    "train": ("common",),
    "estimate": ("common", "train"),
    "tune": ("common", "estimate", "train"),
    "score": ("common", "preprocess", "train"),
    "evaluate": ("common", "preprocess", "score", "train"),
    "register": ("common", "score", "train"),
}
"""Inside components/: the stages in the order they build on each other. The registry access that
evaluate, register and serving share (champion lookup, verified downloads) is in common/, so a
registered model's reader never imports its writer (score never imports register)."""


def test_the_stages_build_on_each_other_one_way():
    offenders = []
    for path in sorted((ROOT / "components").rglob("*.py")):
        parts = path.relative_to(ROOT / "components").parts
        if len(parts) < 2:
            continue
        stage = parts[0]
        assert stage in STAGES, f"components/{stage}/ is in no layer of STAGES: give it one"
        for line, module in imported_modules(path.read_text()):
            names = module.split(".")
            if (
                names[0] == "components"
                and len(names) > 1
                and names[1] not in (stage, *STAGES[stage])
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offenders, "a stage imports one it may not:\n" + "\n".join(offenders)


def test_tests_take_helpers_from_helper_modules_not_from_other_tests():
    # a test file's helpers change with its tests (and its mutation stamp): shared ones live in
    # tests/<helper>.py, listed in tests/README.md
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line, module in imported_modules(path.read_text())
        if module.split(".")[0] == "tests" and module.split(".")[-1].startswith("test_")
    ]
    assert not offenders, "move what these share to a helper module:\n" + "\n".join(offenders)
