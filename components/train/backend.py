"""What a training backend is: ``run(spec) -> summary``, or :class:`LaunchError` naming each failed rank.

The caller picks the backend and passes it in (``launch(spec, backend)``): :class:`LocalTorchrun`
(``components.train.launch``: torchrun on this machine) or ``kube.client.TrainJobBackend``
(a Kubeflow Trainer TrainJob). A backend never reads its choice from the environment, and this
package imports no Kubernetes code.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass

from components.common.plan import read_plan
from components.common.tracking import check_no_credentials
from components.common.train_summary import TrainSummary
from components.train.trainer import TrainConfig


class LaunchError(RuntimeError):
    """Training failed; the message carries every failed rank's error, ``exit_status`` the status
    of the launcher's process where one ended (torchrun's: 28 for a full disk)."""

    def __init__(self, message: str, exit_status: int | None = None) -> None:
        super().__init__(message)
        self.exit_status = exit_status


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
    def of(
        cls,
        *,
        nproc: int | None = None,
        max_restarts: int = 0,
        resume: str = "auto",
        **train: object,
    ) -> LaunchSpec:
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


class TrainingBackend(abc.ABC):
    """Runs the trainer for a :class:`LaunchSpec` somewhere and returns its summary."""

    name: str = "backend"

    @abc.abstractmethod
    def run(self, spec: LaunchSpec) -> TrainSummary:
        """Train; the trainer's summary (``train_summary.json``) or :class:`LaunchError`."""
