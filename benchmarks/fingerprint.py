"""Which code a stored benchmark result measured, so a published number cannot outlive its code.

Every ``benchmarks/results/<name>.json`` carries a ``code`` stamp: the commit it was measured
at, the digest of every file of its scope, and the run's seconds. The scope of a run made under
the recorder (``python -m benchmarks.record``, what every ``make bench-*`` does) is the
repository modules its processes loaded and the data files that steer it (model configs,
hardware profiles, image recipes); a result measured without it falls back on the static
closure: the benchmark's own module and every repository module it reaches through imports
(``components``, ``pipelines``, ``kube``, ``benchmarks``), followed from the entry points in
``SCOPES``. Each Python file counts by its syntax tree without docstrings, so formatting,
comments and wording leave a digest as it is; a change to what the code does does not.

A result whose scope changed since is stale: ``make docs`` marks its published block
(``Stale.mark``), ``tests/unit/test_bench_results.py`` holds the marks true, and
``make bench-stale`` (``benchmarks/rerun.py``) measures it again.

    python -m benchmarks.fingerprint            # each results file: fresh or stale, and why
    python -m benchmarks.fingerprint --scopes   # and how each scope compares with its closure
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "pipelines", "kube", "benchmarks")
"""Top-level packages of the repository; imports of anything else are libraries."""

NOT_MEASURED = (
    "benchmarks.readme",
    "benchmarks.pipeline_graph",
    "benchmarks.fingerprint",
    "benchmarks.record",
    "benchmarks.rerun",
)
"""Helpers that publish a result, not code a benchmark measures."""

CONFIG_PROFILES = "components/estimate/hardware/<named by configs>"
"""The hardware profiles the shipped configs name (``hardware_profile``): what a benchmark that
plans with a config's profile reads, and no other profile."""


@dataclasses.dataclass(frozen=True)
class Scope:
    """What a results file depends on. A result recorded by ``python -m benchmarks.record`` (every
    ``make bench-*``) depends on the repository modules its processes loaded, the modules of
    ``elsewhere`` and the ``data``; one that recorded nothing falls back on the static import
    closure of ``entries``."""

    entries: tuple[str, ...]
    """The benchmark and the modules it starts as subprocesses (the fallback's roots)."""
    data: tuple[str, ...] = ()
    """Data files or folders that steer it (model configs, hardware profiles, image recipes)."""
    elsewhere: tuple[str, ...] = ()
    """Modules run where no recorder reaches (inside containers): their static closure counts."""


_TRAINING = ("components.train.__main__", "components.train.launch")
_PREPROCESS = ("components.preprocess.__main__", "components.datagen.__main__")
_IN_CONTAINERS = (
    "components.preprocess.__main__",
    "components.train.node",
    "components.train.__main__",
)
SCOPES: dict[str, Scope] = {
    "quality": Scope(
        (
            "benchmarks.quality",
            *_PREPROCESS,
            "components.estimate.__main__",
            *_TRAINING,
            "components.evaluate.__main__",
        ),
        ("configs", CONFIG_PROFILES),
    ),
    # its pandas baseline runs as a subprocess of its own
    "preprocess": Scope(("benchmarks.preprocess", "benchmarks.baseline_pandas", *_PREPROCESS)),
    "loader": Scope(("benchmarks.loader",), ("configs",)),
    "train": Scope(("benchmarks.train", *_TRAINING), ("configs",)),
    "estimate": Scope(
        ("benchmarks.estimate", *_TRAINING, "components.estimate.probe"),
        # its refusal example plans prod on a100-80gb
        ("configs", CONFIG_PROFILES, "components/estimate/hardware/a100-80gb.json"),
    ),
    "tune": Scope(("benchmarks.tune", "components.tune.__main__", *_TRAINING), ("configs",)),
    "gpu": Scope(("benchmarks.gpu",), ("configs", "components/estimate/hardware")),
    # the Dockerfiles, locks and build scripts under images/ steer what is built
    "images": Scope(("benchmarks.images",), ("images",)),
    # measured in those images: what the DaskCluster's and the TrainJob's containers run
    "distributed": Scope(("benchmarks.distributed", *_IN_CONTAINERS), ("images",), _IN_CONTAINERS),
    # the scoring server and the model version it serves (built by the benchmark)
    # (MLflow's loader imports the model's own code: components.register.pyfunc, model_code)
    "serving": Scope(
        (
            "benchmarks.serving",
            "components.score.serve",
            "components.score.app",
            "components.register.pyfunc",
            "components.register.model_code",
        )
    ),
    # the champion gate's interval, checked by simulation and on real logs (preprocessed)
    "gate": Scope(("benchmarks.gate", *_PREPROCESS)),
    # the estimate and the trainer at each share of negatives kept, on the quality worlds
    "downsampling": Scope(
        ("benchmarks.downsampling", *_PREPROCESS, "components.estimate.__main__", *_TRAINING),
        ("configs", CONFIG_PROFILES),
    ),
    # every fault-injection, bad-input and security check, and what they exercise
    # (the checks start the stages' CLIs as processes of their own)
    "reliability": Scope(
        (
            "tests.reliability.*",
            "components.estimate.__main__",
            "components.evaluate.__main__",
            "components.register.__main__",
            "components.register.model_code",
            *_TRAINING,
        )
    ),
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


def file_digest(path: str, text: str) -> str:
    """One file's part of a stamp: a Python file by what it does (:func:`code_digest`), any other
    by its bytes."""
    body = code_digest(text) if path.endswith(".py") else hashlib.sha256(text.encode()).hexdigest()
    return body[:16]


def digests(files: dict[str, str]) -> dict[str, str]:
    """{path: :func:`file_digest`} of ``files`` ({path: text})."""
    return {path: file_digest(path, files[path]) for path in sorted(files)}


def digest_files(files: dict[str, str]) -> str:
    """The fingerprint of ``files`` ({path: text}): one digest of every file's digest."""
    return fingerprint_of(digests(files))


def fingerprint_of(file_digests: dict[str, str]) -> str:
    h = hashlib.sha256()
    for path in sorted(file_digests):
        h.update(f"{path}\0{file_digests[path]}\n".encode())
    return h.hexdigest()[:16]


def scope_files(name: str, commit: str | None = None) -> dict[str, str]:
    """{path: text} of what the ``name`` benchmark could measure, now or at ``commit``: the static
    import closure of its entries and its data files (the fallback of a result that recorded
    nothing; :func:`loaded_stamp` is what a recorded run stamps)."""
    scope = SCOPES[name]
    read = at_commit(commit) if commit else working_tree
    listing = _tracked(commit)
    files = module_closure(_expand(scope.entries, listing), read)
    files.update(_data_files(scope.data, read, listing))
    return files


def _expand(entries: tuple[str, ...], listing: Callable[[str], list[str]]) -> tuple[str, ...]:
    """The entries with each ``pkg.*`` replaced by every module of the package's folder."""
    expanded = []
    for entry in entries:
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
    return tuple(expanded)


def data_files(name: str) -> dict[str, str]:
    """{path: text} of the data files that steer the ``name`` benchmark, now."""
    return dict(_data_files(SCOPES[name].data, working_tree, _tracked(None)))


def elsewhere_files(name: str) -> dict[str, str]:
    """{path: text}: the static closure of what the ``name`` benchmark runs out of a recorder's
    reach (inside containers)."""
    return module_closure(SCOPES[name].elsewhere)


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def changed_paths(paths: list[str] | None = None) -> set[str]:
    """The files of the working tree (of ``paths`` only, when given) that differ from HEAD."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--", *(paths or [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    return {line[3:].split(" -> ")[-1] for line in out.splitlines() if len(line) > 3}


def _commit_of(paths: list[str], changed: set[str] | None = None) -> str:
    """HEAD, with ``+changes`` when any of ``paths`` differs from it in the working tree (or, given
    ``changed``, is among those files: the tree as it was when a run started)."""
    dirty = changed_paths(paths) if changed is None else changed & set(paths)
    return head_commit() + ("+changes" if dirty else "")


def stamp_of(
    file_digests: dict[str, str],
    scope: str,
    commit: str | None = None,
    seconds: float | None = None,
) -> dict:
    """A ``code`` stamp: the commit, how the scope was found (``loaded``: recorded in the run;
    ``imports``: the static closure; ``files``: named), every file's digest, and the run's
    wall seconds (what ``make bench-stale`` expects the next run to take)."""
    stamp = {
        "commit": commit or _commit_of(sorted(file_digests)),
        "fingerprint": fingerprint_of(file_digests),
        "scope": scope,
        "files": dict(sorted(file_digests.items())),
    }
    return stamp if seconds is None else {**stamp, "seconds": round(seconds, 1)}


def stamp_for(files: dict[str, str], commit: str | None = None, scope: str = "files") -> dict:
    """The ``code`` stamp of a result over ``files`` ({path: text})."""
    return stamp_of(digests(files), scope, commit)


def stamp(name: str, seconds: float | None = None) -> dict:
    """The ``code`` stamp of the ``name`` benchmark run on the working tree now without a
    recorder: its static scope."""
    return stamp_of(digests(scope_files(name)), "imports", seconds=seconds)


def mutation_files(path: str, tests: list[str], commit: str | None = None) -> dict[str, str]:
    """What one mutation module's result depends on: the mutated file and its tests."""
    read = at_commit(commit) if commit else working_tree
    return {p: read(p) for p in (path, *tests) if read(p) is not None}


@functools.lru_cache(maxsize=4096)
def _digest_now(path: str, size: int, mtime: float) -> str | None:
    text = working_tree(path)
    return None if text is None else file_digest(path, text)


def digest_now(path: str) -> str | None:
    """The working tree's digest of ``path``, None when it is gone (cached while unchanged)."""
    try:
        info = (ROOT / path).stat()
    except OSError:
        return None
    return _digest_now(path, info.st_size, info.st_mtime)


def changed_since(code: dict, also: dict[str, str] | None = None) -> list[str]:
    """The files of the stamp ``code`` whose digest differs now (or that are gone), and the files
    of ``also`` ({path: text}: today's data files) the stamp did not have."""
    recorded = code["files"]
    paths = set(recorded) | set(also or {})
    return sorted(p for p in paths if recorded.get(p) != digest_now(p))


MARK = "**Stale:**"
"""How a published block says its figures were measured on other code (one line each)."""
SHOWN = 3
"""Changed files a mark names before it counts the rest."""


@dataclasses.dataclass(frozen=True)
class Stale:
    """A stored result (or mutation module) whose code changed since it was measured."""

    subject: str
    """What was measured: ``quality.json``, ``mutation module hashing``."""
    commit: str
    """Where: the stamp's commit, or ``an unrecorded commit``."""
    changed: tuple[str, ...]
    """The files of its scope changed since; empty when the stamp records none."""
    rerun: str
    """The command that measures this one again."""
    needs: str | None = None
    """Hardware only some machines have (``a CUDA device``), or None."""

    def short(self) -> str:
        """The commit as people cite one: its first 12 hex digits (and ``+changes``)."""
        if " " in self.commit:
            return self.commit
        head, plus, rest = self.commit.partition("+")
        return f"commit {head[:12]}{plus}{rest}"

    def why(self) -> str:
        if not self.changed:
            return "its stamp names no files (measured before stamps did)"
        named = ", ".join(f"`{p}`" for p in self.changed[:SHOWN])
        more = len(self.changed) - SHOWN
        return f"changed since: {named}" + (f" and {more} more" if more > 0 else "")

    def line(self) -> str:
        """What ``python -m benchmarks.fingerprint`` prints."""
        return f"{self.subject} measured on {self.short()}; {self.why()}; re-run `{self.rerun}`" + (
            f" on a machine with {self.needs}" if self.needs else ""
        )

    def mark(self) -> str:
        """The line under the published block (``make docs``)."""
        return (
            f"{MARK} {self.subject} was measured on {self.short()}; {self.why()}. "
            f"`make bench-stale` measures it again (this one alone: `{self.rerun}`"
            + (f", on a machine with {self.needs}" if self.needs else "")
            + ")."
        )


RERUN = {
    "reliability": "make test-reliability",
    "mutation": "make mutation",
}
NEEDS = {"gpu": "a CUDA device"}
"""Results only a machine with this hardware can measure again."""


def rerun_command(name: str) -> str:
    """The command that measures the ``name`` result again."""
    return RERUN.get(name, f"make bench-{name}")


def staleness(results: Path) -> list[Stale]:
    """What of the stored result ``results`` (a results/*.json) no longer describes the code:
    nothing when it does; one entry per stale module of the mutation results."""
    name = results.stem
    data = json.loads(results.read_text())
    if name == "mutation":
        return [
            found
            for row in data["modules"]
            if (
                found := _stale(
                    row.get("code"),
                    f"mutation module {row['module']}",
                    f"make mutation MODULES={row['module']}",
                )
            )
        ]
    if name not in SCOPES:
        raise ValueError(f"{results.name}: no scope in benchmarks/fingerprint.py SCOPES")
    found = _stale(data.get("code"), results.name, rerun_command(name), data_files(name))
    return [dataclasses.replace(found, needs=NEEDS.get(name))] if found else []


def _stale(code: dict | None, subject: str, rerun: str, also: dict | None = None) -> Stale | None:
    if not code or not isinstance(code.get("files"), dict):  # no stamp, or one without digests
        commit = (code or {}).get("commit") or "an unrecorded commit"
        return Stale(subject, commit, (), rerun)
    changed = changed_since(code, also)
    return Stale(subject, code["commit"], tuple(changed), rerun) if changed else None


def stale(results: Path) -> list[str]:
    """Why the stored result ``results`` no longer describes the code, a line each; empty when
    it does."""
    return [found.line() for found in staleness(results)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.fingerprint",
        description="Say which stored benchmark results still describe the code (a stale one is "
        "marked in the docs by `make docs` and measured again by `make bench-stale`).",
    )
    p.add_argument(
        "--scopes",
        action="store_true",
        help="also compare each result's scope with the static import closure of its benchmark",
    )
    args = p.parse_args(argv)
    any_stale = False
    for results in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        problems = stale(results)
        any_stale |= bool(problems)
        print(f"{results.stem}: {'fresh' if not problems else 'stale'}")
        for line in problems:
            print(f"  {line}")
        if args.scopes and results.stem in SCOPES:
            print(f"  {scope_size(results)}")
    return 1 if any_stale else 0


def scope_size(results: Path) -> str:
    """How the result's scope compares with its benchmark's static import closure."""
    code = json.loads(results.read_text()).get("code") or {}
    static = len(scope_files(results.stem))
    files = code.get("files")
    if code.get("scope") != "loaded" or not isinstance(files, dict):
        return f"scope: the static closure, {static} files (not recorded in a run)"
    recorded, closure = set(files), set(scope_files(results.stem))
    missed, unloaded = sorted(recorded - closure), sorted(closure - recorded)
    return (
        f"scope: {len(files)} files loaded or read in the run; the static closure has {static}: "
        f"{len(unloaded)} of them never loaded, and it misses {len(missed)} the run loaded"
        + (f" ({', '.join(missed[:3])}{' ...' if len(missed) > 3 else ''})" if missed else "")
    )


if __name__ == "__main__":
    sys.exit(main())
