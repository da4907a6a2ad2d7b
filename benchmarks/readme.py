"""Shared helpers of the benchmark scripts: the README block, results paths, threads, dataset.

Every benchmark owns one block of README.md between ``<!-- bench:<name>:start -->``
and ``<!-- bench:<name>:end -->``; a README without those markers is left
alone (the script says so and carries on). Throwaway runs (``--quick``,
``--dry``) never touch README.md or benchmarks/results/.
"""

from __future__ import annotations

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
