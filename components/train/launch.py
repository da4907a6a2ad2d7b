"""The local training backend: `torchrun --standalone` on this machine, and `launch()`.

Backends implement :class:`components.train.backend.TrainingBackend` (`run(spec) -> summary`;
errors surface as `LaunchError` with each failed rank's own message). The caller passes one
in; the cluster's is `kube.client.TrainJobBackend`.

CLI: `python -m components.train.launch --data DIR --plan plan.json --out DIR --nproc N`
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from components.common.cli import Exit, cli_parser, exit_for, field_docs
from components.common.train_summary import TrainSummary
from components.train.backend import LaunchError, LaunchSpec, TrainingBackend
from components.train.torchrun import rank_errors
from components.train.trainer import TrainConfig

__all__ = ["LaunchError", "LaunchSpec", "LocalTorchrun", "launch", "torchrun"]


def torchrun(nproc: int, max_restarts: int, *target: str, log_dir: str | None = None) -> list[str]:
    """``torchrun --standalone`` (our wrapper: :mod:`components.train.torchrun`) running ``target``
    (a script or ``-m module``, with its args); ``log_dir``: where the ranks' error files go."""
    return [
        sys.executable,
        "-m",
        "components.train.torchrun",
        "--standalone",
        f"--nproc_per_node={nproc}",
        f"--max-restarts={max_restarts}",
        *([f"--log-dir={log_dir}"] if log_dir else []),
        *target,
    ]


class LocalTorchrun(TrainingBackend):
    """``torchrun --standalone`` on this machine."""

    name = "local"

    def command(self, spec: LaunchSpec, log_dir: str | None = None) -> list[str]:
        return torchrun(
            spec.processes(),
            spec.max_restarts,
            "-m",
            "components.train",
            *spec.trainer_args(),
            log_dir=log_dir,
        )

    def run(self, spec: LaunchSpec) -> TrainSummary:
        # torchrun's log dir holds this launch's error files only; local temp, so a full `out` disk
        # cannot swallow the report of that full disk
        with tempfile.TemporaryDirectory(prefix="dailyrec-torchrun-") as logs:
            proc = subprocess.run(self.command(spec, logs), check=False)
            if proc.returncode != 0:
                raise LaunchError(failure_message(logs, proc.returncode), proc.returncode)
        return TrainSummary.read(spec.out)


def failure_message(logs: str | Path, returncode: int) -> str:
    """One line per failed rank of the last attempt, from the error files the ranks' ``record`` left in
    torchrun's log dir; the exit code as a last resort."""
    lines = [f"rank {error['rank']}: {error['error']}" for error in rank_errors(logs)]
    if not lines:
        return (
            f"training failed with exit code {returncode} and no rank reported an error (killed?)"
        )
    return "training failed: " + " | ".join(lines)


def launch(spec: LaunchSpec, backend: TrainingBackend | None = None) -> TrainSummary:
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
    TRAIN = field_docs(TrainConfig)
    p = cli_parser("python -m components.train.launch", __doc__.splitlines()[0])
    p.add_argument("--data", required=True, help=TRAIN["data"])
    p.add_argument("--plan", default=None, help=TRAIN["plan"] + " (default: none)")
    p.add_argument("--out", required=True, help=TRAIN["out"])
    p.add_argument(
        "--nproc",
        type=_at_least(1),
        default=None,
        help="processes (default: the plan's nproc_per_node)",
    )
    p.add_argument(
        "--max-restarts",
        type=_at_least(0),
        default=0,
        help="times torchrun restarts all workers after a failure (they resume from OUT/last.pt)",
    )
    p.add_argument("--init-from", default=None, help=TRAIN["init_from"] + " (default: none)")
    p.add_argument("--tracking-uri", default=None, help=TRAIN["tracking_uri"] + " (default: none)")
    p.add_argument(
        "--max-epochs",
        type=int,
        default=None,
        help="override the plan's max_epochs (default: the plan's)",
    )
    args = p.parse_args(argv)
    try:
        summary = launch(LaunchSpec.of(**vars(args)), LocalTorchrun())
    except (LaunchError, ValueError) as exc:
        print(f"launch: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(summary.line())
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
