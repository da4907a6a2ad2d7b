"""Shared helpers of the benchmark scripts: the README block, results paths, threads, dataset.

Every benchmark owns one block of README.md between ``<!-- bench:<name>:start -->``
and ``<!-- bench:<name>:end -->``; a README without those markers is left
alone (the script says so and carries on). Throwaway runs (``--quick``,
``--dry``) never touch README.md or benchmarks/results/.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_DATA = ROOT / "data" / "dataset"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def update_readme(name: str, table: str, readme: str | Path = ROOT / "README.md") -> bool:
    """Replace the ``name`` block of ``readme`` with ``table``; False (and a note) when it has no markers."""
    readme = Path(readme)
    start, end = markers(name)
    text = readme.read_text() if readme.exists() else ""
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        print(f"{readme.name} has no {start} ... {end} markers; table not written there")
        return False
    readme.write_text(pattern.sub(lambda _: f"{start}\n{table}\n{end}", text))
    return True


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
        sys.exit(f"{prog}: error: {data} is not a preprocessed dataset (no meta.json); "
                 f"`make run` creates data/dataset, or pass --data DIR")
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
    return value[len(prefix):] if isinstance(value, str) and value.startswith(prefix) else value


def publish(name: str, result: dict, table: str, results: str | None = None,
            throwaway: bool = False, readme: bool = True) -> Path:
    """Write the JSON, print the table, and (for real measurements) refresh the README block."""
    from components.common.storage import atomic_write_json

    out = atomic_write_json(results_path(name, results, throwaway=throwaway), repo_relative(result))
    print("\n" + table + f"\n\nwrote {out}")
    if readme and not throwaway:  # --quick / --dry figures are no measurement
        update_readme(name, table)
    return out


def dataset_benchmark_parser(doc: str, name: str) -> argparse.ArgumentParser:
    """The flags every benchmark over a preprocessed dataset shares."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="preprocessed dataset (default: data/dataset)")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes: a smoke test, not a measurement (no README; results to a "
                        "temp file unless --results)")
    p.add_argument("--results", default=None,
                   help=f"JSON output (default: benchmarks/results/{name}.json; --quick: a temp file)")
    p.add_argument("--no-readme", action="store_true", help="do not rewrite the README block")
    return p
