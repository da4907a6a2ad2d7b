"""Which code a stored benchmark result measured, so a published number cannot outlive its code.

Every ``benchmarks/results/<name>.json`` carries a ``code`` stamp: the commit it was measured
at and a fingerprint of the code it measured. The code is the benchmark's own module and every
repository module it reaches through imports (``components``, ``pipelines``, ``kube``,
``benchmarks``), followed from the entry points in ``SCOPES`` (the benchmark itself plus the
modules it starts as subprocesses, such as ``python -m components.preprocess``), and the data
files that steer it (model configs, hardware profiles). Each Python file counts by its syntax
tree without docstrings, so formatting, comments and wording leave a fingerprint as it is; a
change to what the code does does not. ``tests/unit/test_bench_results.py`` recomputes every
stamp and names the benchmark to re-run when one no longer matches.

    python -m benchmarks.fingerprint            # each results file: fresh or stale, and why
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "pipelines", "kube", "benchmarks")
"""Top-level packages of the repository; imports of anything else are libraries."""

NOT_MEASURED = ("benchmarks.readme", "benchmarks.pipeline_graph", "benchmarks.fingerprint")
"""Helpers that publish a result, not code a benchmark measures."""

CONFIG_PROFILES = "components/estimate/hardware/<named by configs>"
"""The hardware profiles the shipped configs name (``hardware_profile``): what a benchmark that
plans with a config's profile reads, and no other profile."""

_TRAINING = ("components.train.__main__", "components.train.launch")
_PREPROCESS = ("components.preprocess.__main__", "components.datagen.__main__")
SCOPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name: (entry modules, data files or folders)
    "quality": (
        (
            "benchmarks.quality",
            *_PREPROCESS,
            "components.estimate.__main__",
            *_TRAINING,
            "components.evaluate.__main__",
        ),
        ("configs", CONFIG_PROFILES),
    ),
    "preprocess": (("benchmarks.preprocess", *_PREPROCESS), ()),
    "loader": (("benchmarks.loader",), ("configs",)),
    "train": (("benchmarks.train", *_TRAINING), ("configs",)),
    "estimate": (
        ("benchmarks.estimate", *_TRAINING, "components.estimate.probe"),
        # its refusal example plans prod on a100-80gb
        ("configs", CONFIG_PROFILES, "components/estimate/hardware/a100-80gb.json"),
    ),
    "tune": (("benchmarks.tune", "components.tune.__main__", *_TRAINING), ("configs",)),
    "gpu": (("benchmarks.gpu",), ("configs", "components/estimate/hardware")),
    # the Dockerfiles, locks and build scripts under images/ steer what is built
    "images": (("benchmarks.images",), ("images",)),
    # measured in those images: what the DaskCluster's and the TrainJob's containers run
    "distributed": (
        (
            "benchmarks.distributed",
            "components.preprocess.__main__",
            "components.train.node",
            "components.train.__main__",
        ),
        ("images",),
    ),
    # the scoring server and the model version it serves (built by the benchmark)
    "serving": (("benchmarks.serving", "components.score.serve", "components.score.app"), ()),
    # the champion gate's interval, checked by simulation and on real logs (preprocessed)
    "gate": (("benchmarks.gate", *_PREPROCESS), ()),
    # the estimate and the trainer at each share of negatives kept, on the quality worlds
    "downsampling": (
        ("benchmarks.downsampling", *_PREPROCESS, "components.estimate.__main__", *_TRAINING),
        ("configs", CONFIG_PROFILES),
    ),
    # every fault-injection, bad-input and security check, and what they exercise
    "reliability": (("tests.reliability.*",), ()),
}
"""What each results file measured. A mutation result is stamped per module instead
(``benchmarks.mutation``): the mutated file and the tests run against it."""

Reader = Callable[[str], str | None]
"""Text of a repository path (``components/train/model.py``), or None when it does not exist."""


def working_tree(path: str) -> str | None:
    p = ROOT / path
    return p.read_text() if p.is_file() else None


def at_commit(commit: str) -> Reader:
    """A reader of the files as they were at ``commit``."""

    def read(path: str) -> str | None:
        done = subprocess.run(
            ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True
        )
        return done.stdout if done.returncode == 0 else None

    return read


def _module_path(module: str, read: Reader) -> str | None:
    base = module.replace(".", "/")
    for path in (base + ".py", base + "/__init__.py"):
        if read(path) is not None:
            return path
    return None


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name the code imports, anywhere in the file (function bodies included)."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            # ``from pkg import module`` imports a module too
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _is_text(node: ast.stmt) -> bool:
    value = node.value if isinstance(node, ast.Expr) else None
    return isinstance(value, ast.Constant) and isinstance(value.value, str)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """Drop every statement that is only a string: the docstrings of modules, classes and
    functions, and those written under a field or constant (documentation, not behaviour)."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [stmt for stmt in body if not _is_text(stmt)]
                if len(kept) != len(body):
                    setattr(node, name, kept or [ast.Pass()])
    return tree


def _canonical(node: object) -> str:
    """The tree as text, fields that are empty left out: ``ast.dump`` of the same code differs
    between Python versions (3.12 adds ``type_params=[]``), and a result measured on a machine
    with another Python must stamp the same code the same way."""
    if isinstance(node, ast.JoinedStr):  # 3.12 ends some format specs with an empty string
        values = [v for v in node.values if not (isinstance(v, ast.Constant) and v.value == "")]
        node = ast.JoinedStr(values=values)
    if isinstance(node, ast.AST):
        values = ((name, getattr(node, name, None)) for name in node._fields)
        kept = [f"{name}={_canonical(v)}" for name, v in values if v is not None and v != []]
        return f"{type(node).__name__}({', '.join(kept)})"
    if isinstance(node, list):
        return f"[{', '.join(_canonical(item) for item in node)}]"
    return repr(node)


def code_digest(text: str) -> str:
    """What a Python file does: its syntax tree without docstrings (not its layout or comments)."""
    return hashlib.sha256(_canonical(_strip_docstrings(ast.parse(text))).encode()).hexdigest()


def module_closure(entries: tuple[str, ...], read: Reader = working_tree) -> dict[str, str]:
    """{path: text} of the entry modules and every repository module they import, transitively
    (a package's ``__init__`` counts when one of its modules is imported)."""
    files: dict[str, str] = {}
    todo = list(entries)
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if (
            module in seen
            or module in NOT_MEASURED
            or module.split(".")[0] not in (*PACKAGES, "tests")
        ):
            continue
        seen.add(module)
        parts = module.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages
        path = _module_path(module, read)
        if path is None:
            continue  # ``from pkg import name`` where name is not a module
        text = read(path)
        files[path] = text
        todo.extend(_imports(ast.parse(text), module, path.endswith("__init__.py")))
    return files


def _config_profiles(read: Reader, listing: Callable[[str], list[str]]) -> list[str]:
    names = set()
    for path in listing("configs"):
        if path.endswith(".json"):
            name = json.loads(read(path) or "{}").get("hardware_profile")
            names.update([name] if name else [])
    return [f"components/estimate/hardware/{name}.json" for name in sorted(names)]


def _data_files(paths: tuple[str, ...], read: Reader, listing: Callable[[str], list[str]]):
    for entry in paths:
        found = _config_profiles(read, listing) if entry == CONFIG_PROFILES else listing(entry)
        for path in found:
            text = read(path)
            if text is not None:
                yield path, text


def _tracked(commit: str | None) -> Callable[[str], list[str]]:
    def listing(entry: str) -> list[str]:
        args = ["git", "ls-tree", "-r", "--name-only", commit, "--", entry] if commit else None
        if args is None:  # the working tree: files git would track (not ignored)
            args = ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", entry]
        out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return sorted(p for p in out.splitlines() if not p.endswith((".pyc", ".md")))

    return listing


def digest_files(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        text = files[path]
        body = (
            code_digest(text) if path.endswith(".py") else hashlib.sha256(text.encode()).hexdigest()
        )
        h.update(f"{path}\0{body}\n".encode())
    return h.hexdigest()[:16]


def scope_files(name: str, commit: str | None = None) -> dict[str, str]:
    """{path: text} of what the ``name`` benchmark measures, now or at ``commit``."""
    entries, data = SCOPES[name]
    read = at_commit(commit) if commit else working_tree
    listing = _tracked(commit)
    expanded = []
    for entry in entries:  # ``pkg.*``: every module of the package folder
        if entry.endswith(".*"):
            folder = entry[:-2].replace(".", "/")
            paths = [
                p
                for p in listing(folder)
                if p.endswith(".py") and p.count("/") == folder.count("/") + 1
            ]
            expanded.extend(p.removesuffix(".py").replace("/", ".") for p in paths)
        else:
            expanded.append(entry)
    files = module_closure(tuple(expanded), read)
    files.update(_data_files(data, read, listing))
    return files


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def stamp_for(files: dict[str, str], commit: str | None = None) -> dict:
    """The ``code`` stamp of a result over ``files``: where it was measured and what."""
    if commit is None:
        commit = head_commit()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *sorted(files)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        commit += "+changes" if dirty else ""
    return {"commit": commit, "fingerprint": digest_files(files), "files": len(files)}


def stamp(name: str) -> dict:
    """The ``code`` stamp of the ``name`` benchmark measured on the working tree now."""
    return stamp_for(scope_files(name))


def mutation_files(path: str, tests: list[str], commit: str | None = None) -> dict[str, str]:
    """What one mutation module's result depends on: the mutated file and its tests."""
    read = at_commit(commit) if commit else working_tree
    return {p: read(p) for p in (path, *tests) if read(p) is not None}


def stale(results: Path) -> list[str]:
    """Why the stored result ``results`` (a results/*.json) no longer describes the code; empty
    when it does."""
    name = results.stem
    data = json.loads(results.read_text())
    rerun = f"re-run `{RERUN.get(name, f'make bench-{name}')}`" + (
        f" on a machine with {NEEDS[name]}" if name in NEEDS else ""
    )
    if name == "mutation":
        problems = []
        for row in data["modules"]:
            code = row.get("code")
            now = digest_files(mutation_files(row["path"], row["tests"]))
            if not code or code["fingerprint"] != now:
                measured = code["commit"][:12] if code else "an unrecorded commit"
                problems.append(
                    f"mutation module {row['module']} was measured on {measured}: its code or "
                    f"tests changed since; re-run `make mutation MODULES={row['module']}`"
                )
        return problems
    code = data.get("code")
    if not code:
        return [f"{results.name} records no code fingerprint; {rerun}"]
    if name not in SCOPES:
        return [f"{results.name}: no scope in benchmarks/fingerprint.py SCOPES"]
    now = digest_files(scope_files(name))
    if code["fingerprint"] != now:
        return [
            f"{results.name} was measured on commit {code['commit'][:12]}; the code it measures "
            f"changed since: {rerun}"
        ]
    return []


RERUN = {
    "reliability": "make test-reliability",
    "mutation": "make mutation",
}
NEEDS = {"gpu": "a CUDA device"}
"""Results only a machine with this hardware can measure again."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.fingerprint",
        description="Say which stored benchmark results still describe the code.",
    )
    p.parse_args(argv)
    worst = 0
    for results in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        problems = stale(results)
        print(f"{results.stem}: {'fresh' if not problems else 'stale'}")
        for line in problems:
            print(f"  {line}")
        worst = max(worst, 1 if problems else 0)
    return worst


if __name__ == "__main__":
    sys.exit(main())
