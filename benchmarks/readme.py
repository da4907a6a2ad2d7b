"""Shared helpers of the benchmark scripts: the published blocks, results paths, threads, dataset.

Every benchmark owns one block between ``<!-- bench:<name>:start -->`` and
``<!-- bench:<name>:end -->`` in one Markdown file of the documentation (README.md or
docs/*.md: whichever holds the markers); when no file holds them, the block is not
written (the script says so and carries on). Throwaway runs (``--quick``, ``--dry``)
never touch the documentation or benchmarks/results/.

``python -m benchmarks.readme`` (``make docs``) rewrites every block that needs no
measurement: each benchmark's table from its stored results file (after a change to a
table's wording) with a stale mark under it when its code changed since it was measured, the
picture of the pipeline from the compiled pipeline and the table of its parameters from their
declaration.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_DATA = ROOT / "data" / "dataset"
NO_README_HELP = "do not rewrite the published block (README.md or docs/)"
PUBLISHED = (
    "quality",
    "preprocess",
    "loader",
    "train",
    "estimate",
    "gpu",
    "tune",
    "mutation",
    "images",
    "distributed",
    "serving",
    "gate",
    "downsampling",
)
"""Benchmarks whose module renders its block from its stored results: ``readme_table(result)``."""
FROM_CODE = ("pipeline-graph", "pipeline-parameters", "exit-statuses")
"""Blocks drawn from the code itself: the compiled pipeline's picture, the daily pipeline's
parameters (:mod:`pipelines.parameters`), the CLIs' exit statuses (:func:`exit_statuses`)."""
MEASURED = (*PUBLISHED, "reliability")
"""Every block drawn from a results file (the reliability table from the tests' own report),
each with its stale marks."""


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def doc_files(root: Path | None = None) -> list[Path]:
    """The Markdown files that may hold a generated block: README.md and docs/*.md."""
    root = root or ROOT
    return [p for p in (root / "README.md", *sorted((root / "docs").glob("*.md"))) if p.is_file()]


def block_home(name: str, root: Path | None = None) -> Path | None:
    """The one documentation file holding the ``name`` block's start marker; None when none does."""
    root = root or ROOT
    start, _ = markers(name)
    homes = [p for p in doc_files(root) if start in p.read_text()]
    if len(homes) > 1:
        raise ValueError(
            f"block {start} is in {len(homes)} files "
            f"({', '.join(p.relative_to(root).as_posix() for p in homes)}): keep it in one"
        )
    return homes[0] if homes else None


def update_block(name: str, text: str, root: Path | None = None) -> Path | None:
    """Replace the ``name`` block with ``text`` wherever it lives; the file written, or None (and a
    note) when no documentation file holds the markers."""
    from components.common.storage import atomic_write_bytes

    start, end = markers(name)
    home = block_home(name, root)
    if home is None:
        print(
            f"no {start} ... {end} markers in README.md or docs/*.md; the {name} block is not written"
        )
        return None
    content = home.read_text()
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if not pattern.search(content):
        raise ValueError(f"{home}: {start} has no {end} after it")
    replaced = pattern.sub(lambda _: f"{start}\n{text}\n{end}", content)
    if replaced != content:
        atomic_write_bytes(home, replaced.encode())  # a reader never sees half a page
    return home


def results_path(name: str, given: str | None, throwaway: bool = False) -> Path:
    """Where a benchmark's JSON goes: ``--results`` when given; else, for a throwaway run
    (--quick, --dry: not a measurement), a fresh temp folder; else benchmarks/results/<name>.json."""
    if given:
        return Path(given)
    if throwaway:
        return Path(tempfile.mkdtemp(prefix=f"bench-{name}-")) / f"{name}.json"
    return RESULTS / f"{name}.json"


def require_dataset(data: str | Path, prog: str) -> Path:
    """The dataset folder, or exit with one line that says how to make it."""
    data = Path(data)
    if not (data / "meta.json").is_file():
        sys.exit(
            f"{prog}: error: {data} is not a preprocessed dataset (no meta.json); "
            f"`make run` creates data/dataset, or pass --data DIR"
        )
    return data


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def repo_relative(value):
    """``value`` with every path inside the repo written relative to it: results are committed,
    and a machine's absolute paths mean nothing on another."""
    if isinstance(value, dict):
        return {k: repo_relative(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repo_relative(v) for v in value]
    prefix = str(ROOT) + "/"
    return value[len(prefix) :] if isinstance(value, str) and value.startswith(prefix) else value


def publish(
    name: str,
    result: dict,
    table: str,
    results: str | None = None,
    throwaway: bool = False,
    readme: bool = True,
) -> Path:
    """Write the JSON, print the table, and (for real measurements) refresh the published block."""
    from benchmarks.fingerprint import SCOPES, stamp
    from components.common.storage import atomic_write_json

    if name in SCOPES:  # which code this measured (benchmarks/fingerprint.py)
        result = {**result, "code": stamp(name, seconds=_process_seconds())}
    out = atomic_write_json(results_path(name, results, throwaway=throwaway), repo_relative(result))
    print("\n" + table + f"\n\nwrote {out}")
    if readme and not throwaway:  # --quick / --dry figures are no measurement
        update_block(name, table)
    return out


def _process_seconds() -> float:
    """How long this process has run: the benchmark's wall time, as ``make bench-stale`` plans."""
    import psutil

    return time.time() - psutil.Process().create_time()


def quick_main(
    name: str, doc: str, quick_help: str, measure, table, argv: list[str] | None = None
) -> int:
    """The CLI of a benchmark that only takes ``--quick``: measure, publish, exit 0."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument(
        "--results", default=None, help=f"JSON output (default: benchmarks/results/{name}.json)"
    )
    p.add_argument("--no-readme", action="store_true", help=NO_README_HELP)
    args = p.parse_args(argv)
    result = measure(args.quick)
    publish(name, result, table(result), args.results, args.quick, not args.no_readme)
    return 0


def dataset_benchmark_parser(doc: str, name: str) -> argparse.ArgumentParser:
    """The flags every benchmark over a preprocessed dataset shares."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument(
        "--data", default=str(DEFAULT_DATA), help="preprocessed dataset (default: data/dataset)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes: a smoke test, not a measurement (no published block; results to a "
        "temp file unless --results)",
    )
    p.add_argument(
        "--results",
        default=None,
        help=f"JSON output (default: benchmarks/results/{name}.json; --quick: a temp file)",
    )
    p.add_argument("--no-readme", action="store_true", help=NO_README_HELP)
    return p


def table_from_results(name: str, results: Path = RESULTS) -> str:
    """The ``name`` block as its benchmark renders it from the stored results file (no measuring),
    with a mark under it for each part whose code changed since it was measured."""
    path = results / f"{name}.json"
    return _body(name, json.loads(path.read_text())) + marks(path)


def _body(name: str, result: dict) -> str:
    if name == "reliability":  # written by the tests' own report (make test-reliability)
        from tests.reliability.report import table

        return table(result["rows"]).strip("\n")
    return importlib.import_module(f"benchmarks.{name}").readme_table(result)


def marks(path: Path) -> str:
    """The stale marks of the stored result ``path``, each on its own line under the table."""
    from benchmarks.fingerprint import staleness

    return "".join(f"\n\n{found.mark()}" for found in staleness(path))


def read_block(name: str, root: Path | None = None) -> str | None:
    """The text between the ``name`` block's markers, wherever it lives; None when no file has it."""
    home = block_home(name, root)
    if home is None:
        return None
    start, end = markers(name)
    text = home.read_text()
    return text[text.index(start) + len(start) : text.index(end)].strip("\n")


def mark_problems(name: str, root: Path | None = None, results: Path = RESULTS) -> list[str]:
    """Where the ``name`` block's stale marks say other than its results file: a stale result (or
    mutation module) without its mark, or a mark on one that is fresh."""
    from benchmarks.fingerprint import staleness

    block = read_block(name, root)
    if block is None:
        return [f"no file of README.md, docs/*.md holds the {name} block"]
    expected, found = [s.mark() for s in staleness(results / f"{name}.json")], marks_in(block)
    return [f"{name}: stale but not marked: {m}" for m in expected if m not in found] + [
        f"{name}: marked stale, but its code is as measured: {m}"
        for m in found
        if m not in expected
    ]


def marks_in(block: str) -> list[str]:
    """The stale marks a published block carries."""
    from benchmarks.fingerprint import MARK

    return [line for line in block.splitlines() if line.startswith(MARK)]


def _markdown(docstring: str) -> str:
    """A docstring as one Markdown table cell: one line, single backticks, no final period."""
    return " ".join(docstring.split()).replace("``", "`").removesuffix(".")


def exit_statuses() -> str:
    """The table of every CLI's exit statuses, from :class:`components.common.cli.Exit`'s member
    docstrings and :func:`~components.common.cli.signal_exit`'s."""
    import ast
    import inspect

    from components.common import cli

    body = ast.parse(inspect.getsource(cli.Exit)).body[0].body
    lines = ["| status | meaning |", "|---:|---|"]
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.Assign) and isinstance(after, ast.Expr):
            member = cli.Exit[node.targets[0].id]
            lines.append(f"| {int(member)} | {_markdown(after.value.value)} |")
    lines.append(f"| 128+N | {_markdown(inspect.getdoc(cli.signal_exit).split(chr(10) * 2)[1])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.readme",
        description="Rewrite the generated blocks of README.md and docs/ that need no measurement: "
        "each benchmark's table from its stored results file, and the picture of the "
        "pipeline from the compiled pipeline.",
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"blocks to rewrite (default: all): {', '.join((*FROM_CODE, *MEASURED))}",
    )
    args = p.parse_args(argv)
    unknown = sorted(set(args.names) - {*FROM_CODE, *MEASURED})
    if unknown:
        p.error(f"unknown block {', '.join(unknown)}")
    for name in args.names or (*FROM_CODE, *MEASURED):
        if name == "pipeline-graph":
            from benchmarks.pipeline_graph import compiled_pipeline, mermaid

            text = mermaid(compiled_pipeline())
        elif name == "pipeline-parameters":
            from pipelines.parameters import markdown_table

            text = markdown_table()
        elif name == "exit-statuses":
            text = exit_statuses()
        elif (RESULTS / f"{name}.json").is_file():
            text = table_from_results(name)
        else:
            print(
                f"{name}: no {RESULTS.relative_to(ROOT)}/{name}.json yet; run the benchmark first"
            )
            continue
        home = update_block(name, text)
        if home is not None:
            stale = len(marks_in(text))
            print(
                f"{name}: {home.relative_to(ROOT)}" + (f" (marked stale: {stale})" if stale else "")
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())


def measurement_main(name: str, doc: str, measure, table, argv: list[str] | None = None) -> int:
    """The CLI of a benchmark that takes no inputs: measure, then publish (results + block)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument(
        "--results", default=None, help=f"JSON output (default: benchmarks/results/{name}.json)"
    )
    p.add_argument("--no-readme", action="store_true", help=NO_README_HELP)
    args = p.parse_args(argv)
    result = measure()
    publish(name, result, table(result), args.results, readme=not args.no_readme)
    return 0
