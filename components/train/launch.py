"""The local training backend: ``torchrun --standalone`` on this machine, and ``launch()``.

Backends implement :class:`components.train.backend.TrainingBackend` (``run(spec) -> summary``;
errors surface as ``LaunchError`` with each failed rank's own message). The caller passes one
in; the cluster's is ``kube.client.TrainJobBackend``.

CLI: ``python -m components.train.launch --data DIR --plan plan.json --out DIR --nproc N``
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from components.common.storage import error_dirs, rank_reports
from components.train.backend import LaunchError, LaunchSpec, TrainingBackend
from components.train.trainer import read_summary, summary_line

__all__ = ["LaunchError", "LaunchSpec", "LocalTorchrun", "launch", "torchrun"]


def torchrun(nproc: int, max_restarts: int, *target: str) -> list[str]:
    """``torchrun --standalone`` (our wrapper: :mod:`components.train.torchrun`) running ``target``
    (a script or ``-m module``, with its args)."""
    return [sys.executable, "-m", "components.train.torchrun", "--standalone", f"--nproc_per_node={nproc}",
            f"--max-restarts={max_restarts}", *target]


class LocalTorchrun(TrainingBackend):
    """``torchrun --standalone`` on this machine."""

    name = "local"

    def command(self, spec: LaunchSpec) -> list[str]:
        return torchrun(spec.processes(), spec.max_restarts, "-m", "components.train",
                        *spec.trainer_args())

    def run(self, spec: LaunchSpec) -> dict:
        for errors in error_dirs(spec.out):
            shutil.rmtree(errors, ignore_errors=True)  # only this launch's failures count
        proc = subprocess.run(self.command(spec), check=False)
        if proc.returncode != 0:
            raise LaunchError(failure_message(spec.out, proc.returncode))
        return read_summary(spec.out)


def failure_message(out: str | Path, returncode: int) -> str:
    """One line per failed rank, from the files the trainer leaves; the exit code as a last resort."""
    reports = rank_reports(out)
    lines = []
    for path in reports:
        report = json.loads(path.read_text())
        lines.append(f"rank {report['rank']}: {report['error']}")
    if not lines:
        return f"training failed with exit code {returncode} and no rank reported an error (killed?)"
    return "training failed: " + " | ".join(lines)


def launch(spec: LaunchSpec, backend: TrainingBackend | None = None) -> dict:
    """Train ``spec`` on ``backend`` (default: torchrun here) and return the summary."""
    return (backend or LocalTorchrun()).run(spec)


def _at_least(low: int):
    """An argparse type: an integer >= ``low`` (torchrun answers 0 processes with an AssertionError)."""
    def parse(text: str) -> int:
        value = int(text)  # a ValueError: argparse says "invalid int value"
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m components.train.launch", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--plan", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--nproc", type=_at_least(1), default=None,
                   help="processes (default: the plan's nproc_per_node)")
    p.add_argument("--max-restarts", type=_at_least(0), default=0)
    p.add_argument("--init-from", default=None)
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--max-epochs", type=int, default=None)
    args = p.parse_args(argv)
    try:
        summary = launch(LaunchSpec.of(**vars(args)), LocalTorchrun())
    except (LaunchError, ValueError) as exc:
        print(f"launch: error: {exc}", file=sys.stderr)
        return 1
    print(summary_line(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
