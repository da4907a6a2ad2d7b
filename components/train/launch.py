"""Launchers: start the trainer on N processes and return its summary.

``local`` runs ``torchrun --standalone`` on this machine. A cluster backend
(a Kubeflow Trainer TrainJob) implements the same ``Launcher`` protocol:
``run(spec) -> summary``; errors surface as ``LaunchError`` with each failed
rank's own message.

CLI: ``python -m components.train.launch --data DIR --plan plan.json --out DIR --nproc N``
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from components.common.cli import HelpFormatter, field_docs
from components.common.plan import read_plan
from components.common.tracking import check_no_credentials
from components.train.torchrun import rank_errors
from components.train.trainer import TrainConfig, read_summary, summary_line


class LaunchError(RuntimeError):
    """Training failed; the message carries every failed rank's error."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to train (the trainer's own config) and with how many processes."""

    train: TrainConfig
    nproc: int | None = None
    """Processes on this node; None = the plan's nproc_per_node."""
    max_restarts: int = 0
    """How often torchrun restarts all workers after a failure (they resume from last.pt)."""

    def __post_init__(self) -> None:
        # the trainer's flags end up on torchrun's command line (ps) and in a TrainJob's args
        check_no_credentials(self.train.tracking_uri or "", "tracking_uri")

    @classmethod
    def of(cls, *, nproc: int | None = None, max_restarts: int = 0, resume: str = "auto",
           **train: object) -> LaunchSpec:
        """A spec from TrainConfig's fields; resume defaults to auto so restarted workers continue."""
        return cls(TrainConfig(resume=resume, **train), nproc, max_restarts)

    @property
    def out(self) -> str:
        return self.train.out

    def processes(self) -> int:
        if self.nproc is not None:
            return self.nproc
        return read_plan(self.train.plan)[0].nproc_per_node if self.train.plan else 1

    def trainer_args(self) -> list[str]:
        """The trainer CLI's flags for every set field of the TrainConfig."""
        args = []
        for f in dataclasses.fields(TrainConfig):
            value = getattr(self.train, f.name)
            if value is not None:
                args += [f"--{f.name.replace('_', '-')}", str(value)]
        return args


class Launcher(Protocol):
    def run(self, spec: LaunchSpec) -> dict: ...


def torchrun(nproc: int, max_restarts: int, *target: str, log_dir: str | None = None) -> list[str]:
    """``torchrun --standalone`` (our wrapper: :mod:`components.train.torchrun`) running ``target``
    (a script or ``-m module``, with its args); ``log_dir``: where the ranks' error files go."""
    return [sys.executable, "-m", "components.train.torchrun", "--standalone", f"--nproc_per_node={nproc}",
            f"--max-restarts={max_restarts}", *([f"--log-dir={log_dir}"] if log_dir else []), *target]


class LocalTorchrun:
    """``torchrun --standalone`` on this machine."""

    def command(self, spec: LaunchSpec, log_dir: str | None = None) -> list[str]:
        return torchrun(spec.processes(), spec.max_restarts, "-m", "components.train",
                        *spec.trainer_args(), log_dir=log_dir)

    def run(self, spec: LaunchSpec) -> dict:
        # torchrun's log dir holds this launch's error files only; local temp, so a full `out` disk
        # cannot swallow the report of that full disk
        with tempfile.TemporaryDirectory(prefix="dailyrec-torchrun-") as logs:
            proc = subprocess.run(self.command(spec, logs), check=False)
            if proc.returncode != 0:
                raise LaunchError(failure_message(logs, proc.returncode))
        return read_summary(spec.out)


def failure_message(logs: str | Path, returncode: int) -> str:
    """One line per failed rank of the last attempt, from the error files the ranks' ``record`` left in
    torchrun's log dir; the exit code as a last resort."""
    lines = [f"rank {error['rank']}: {error['error']}" for error in rank_errors(logs)]
    if not lines:
        return f"training failed with exit code {returncode} and no rank reported an error (killed?)"
    return "training failed: " + " | ".join(lines)


def _trainjob() -> Launcher:
    from components.train.trainjob import TrainJobLauncher  # kubernetes client: only when used

    return TrainJobLauncher()


LAUNCHERS: dict[str, Any] = {"local": LocalTorchrun, "trainjob": _trainjob}
"""Backends: a class or factory returning an object with ``run(spec) -> summary``."""


def launch(spec: LaunchSpec, backend: str = "local") -> dict:
    if backend not in LAUNCHERS:
        raise ValueError(f"unknown launcher backend {backend!r}; known: {', '.join(LAUNCHERS)}")
    return LAUNCHERS[backend]().run(spec)


def _cluster_errors() -> tuple[type[Exception], ...]:
    """What the Kubernetes client raises, unwrapped: no kube config, a refused connection, an API error."""
    import urllib3

    try:
        from kubernetes.client.exceptions import OpenApiException
        from kubernetes.config import ConfigException
    except ImportError:  # the local backend does not need the kubernetes client
        return (urllib3.exceptions.HTTPError,)
    return urllib3.exceptions.HTTPError, OpenApiException, ConfigException


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
    p = argparse.ArgumentParser(prog="python -m components.train.launch", formatter_class=HelpFormatter,
                                description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help=TRAIN["data"])
    p.add_argument("--plan", default=None, help=TRAIN["plan"] + " (default: none)")
    p.add_argument("--out", required=True, help=TRAIN["out"])
    p.add_argument("--nproc", type=_at_least(1), default=None,
                   help="processes (default: the plan's nproc_per_node)")
    p.add_argument("--max-restarts", type=_at_least(0), default=0, help="times torchrun restarts all workers after a failure (they resume from OUT/last.pt)")
    p.add_argument("--init-from", default=None, help=TRAIN["init_from"] + " (default: none)")
    p.add_argument("--tracking-uri", default=None, help=TRAIN["tracking_uri"] + " (default: none)")
    p.add_argument("--max-epochs", type=int, default=None, help="override the plan's max_epochs (default: the plan's)")
    p.add_argument("--backend", default="local", choices=sorted(LAUNCHERS), help="local: torchrun on this machine; trainjob: a Kubeflow Trainer TrainJob")
    args = p.parse_args(argv)
    backend = args.__dict__.pop("backend")
    try:
        summary = launch(LaunchSpec.of(**vars(args)), backend)
    except (LaunchError, ValueError) as exc:
        print(f"launch: error: {exc}", file=sys.stderr)
        return 1
    except _cluster_errors() as exc:  # trainjob backend: no kube config, API unreachable or refusing
        reason = " ".join(str(exc).split())[:300]  # ApiException's text spans lines (headers, body)
        print(f"launch: error: {backend}: {type(exc).__name__}: {reason}", file=sys.stderr)
        return 1
    print(summary_line(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
