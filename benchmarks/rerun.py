"""Measure again exactly what is stale: ``make bench-stale``.

    python -m benchmarks.rerun            # the stale results and mutation modules, cheapest first
    python -m benchmarks.rerun --plan     # only say what would run and how long it should take

A result is stale when a file of its scope changed since it was measured
(``benchmarks/fingerprint.py``); each one is re-run by its own make target, mutation modules
together in one ``make mutation MODULES=...``. Before starting, the plan and its expected time
(each result's stored seconds) are printed; each step says when it starts, how long it took
and what is left. What this machine cannot measure (a GPU result without a CUDA device, the
container results without a container engine) is listed and left marked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.fingerprint import ROOT, Stale, staleness

RESULTS = ROOT / "benchmarks" / "results"
CONTAINERS = ("images", "distributed")
"""Results measured in containers: they need docker or podman."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One command of the round."""

    what: str
    command: tuple[str, ...]
    seconds: float | None
    """Expected: the stored seconds of the run being repeated; None when it recorded none."""
    blocked: str | None = None
    """Why this machine cannot run it, or None."""

    def expected(self) -> str:
        return "time unknown (not recorded)" if self.seconds is None else _duration(self.seconds)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def stored_seconds(path: Path, module: str | None = None) -> float | None:
    """How long the stored run took: its stamp's ``seconds``, else the result's own."""
    data = json.loads(path.read_text())
    if module is not None:
        row = next(r for r in data["modules"] if r["module"] == module)
        return row.get("seconds") or (row.get("code") or {}).get("seconds")
    seconds = (data.get("code") or {}).get("seconds", data.get("seconds"))
    return float(seconds) if isinstance(seconds, (int, float)) else None


def _blocked(name: str, found: Stale) -> str | None:
    if found.needs == "a CUDA device" and not _cuda():
        return "needs a CUDA device"
    if name in CONTAINERS and not _container_engine():
        return "needs docker or podman"
    return None


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _container_engine() -> bool:
    for engine in ("docker", "podman"):
        if shutil.which(engine):
            done = subprocess.run([engine, "info"], capture_output=True, check=False)
            if done.returncode == 0:
                return True
    return False


def plan(results: Path = RESULTS) -> list[Step]:
    """The round: one step per stale result, one for every stale mutation module; runnable ones
    cheapest first (those with no stored time after them), then what cannot run here."""
    steps = []
    for path in sorted(results.glob("*.json")):
        found = staleness(path)
        if not found:
            continue
        if path.stem == "mutation":
            modules = [f.subject.rpartition(" ")[2] for f in found]
            times = [stored_seconds(path, m) for m in modules]
            seconds = None if None in times else sum(times)
            steps.append(
                Step(
                    f"mutation ({', '.join(modules)})",
                    ("make", "mutation", f"MODULES={' '.join(modules)}"),
                    seconds,
                )
            )
            continue
        command = tuple(found[0].rerun.split())
        steps.append(Step(path.name, command, stored_seconds(path), _blocked(path.stem, found[0])))
    return sorted(
        steps,
        key=lambda s: (s.blocked is not None, s.seconds is None, s.seconds or 0, s.what),
    )


def describe(steps: list[Step]) -> str:
    runnable = [s for s in steps if s.blocked is None]
    known = sum(s.seconds for s in runnable if s.seconds is not None)
    unknown = sum(s.seconds is None for s in runnable)
    lines = [
        f"bench-stale: {len(runnable)} to measure again, expected {_duration(known)}"
        + (f" plus {unknown} with no recorded time" if unknown else "")
    ]
    for i, step in enumerate(runnable, 1):
        lines.append(f"  {i}. {' '.join(step.command):<42} {step.what}: {step.expected()}")
    for step in steps:
        if step.blocked:
            lines.append(f"  not here: {step.what} ({step.blocked}): stays marked stale")
    return "\n".join(lines)


def run(steps: list[Step]) -> int:
    runnable = [s for s in steps if s.blocked is None]
    failed, started = [], time.monotonic()
    for i, step in enumerate(runnable, 1):
        print(
            f"\nbench-stale [{i}/{len(runnable)}] {' '.join(step.command)}: expected "
            f"{step.expected()}; {_duration(time.monotonic() - started)} spent; "
            f"{_to_go(runnable[i - 1 :])}",
            flush=True,
        )
        begun = time.monotonic()
        command = (os.environ.get("MAKE", "make"), *step.command[1:])
        code = subprocess.call(command, cwd=ROOT)
        took = time.monotonic() - begun
        print(f"bench-stale [{i}/{len(runnable)}] {step.what}: exit {code} in {_duration(took)}")
        if code != 0:
            failed.append(step.what)
    subprocess.call([sys.executable, "-m", "benchmarks.readme"], cwd=ROOT)  # marks as they now are
    print(f"\nbench-stale: done in {_duration(time.monotonic() - started)}")
    if failed:
        print(f"bench-stale: failed: {', '.join(failed)}: their results stay marked stale")
    return 1 if failed else 0


def _to_go(steps: list[Step]) -> str:
    """What is left of the round, this step included, as far as stored times tell."""
    known = sum(s.seconds for s in steps if s.seconds is not None)
    unknown = sum(s.seconds is None for s in steps)
    return f"about {_duration(known)} to go" + (
        f" plus {unknown} step(s) with no recorded time" if unknown else ""
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.rerun", description=__doc__.splitlines()[0]
    )
    p.add_argument("--plan", action="store_true", help="say what would run; run nothing")
    args = p.parse_args(argv)
    print("bench-stale: reading which results are stale ...", flush=True)
    steps = plan()
    print(describe(steps), flush=True)
    if args.plan or not any(s.blocked is None for s in steps):
        return 0
    return run(steps)


if __name__ == "__main__":
    sys.exit(main())
