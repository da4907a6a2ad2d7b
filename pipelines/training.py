"""What the train task does around the launcher: the champion to warm-start from, and which
launch failures a retried task must not repeat."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


def champion_start(
    warm_start: bool, tracking_uri: str, model_name: str, run_dir: str
) -> tuple[int | None, str | None]:
    """(champion version, its checkpoint under ``run_dir/champion``) to initialize from; (None,
    None) without warm start, tracking or a champion (the first run). The registry is opened
    read-only: a reader."""
    if not (warm_start and tracking_uri):
        return None, None
    from components.common.registry import champion_checkpoint
    from components.common.registry_read import NoRegistry, connect_readonly

    try:
        client = connect_readonly(tracking_uri)
    except NoRegistry:  # the first run: nothing to start from
        return None, None
    found = champion_checkpoint(client, model_name, str(Path(run_dir) / "champion"))
    return found if found else (None, None)


@contextlib.contextmanager
def final_when_spent(launcher: str) -> Iterator[None]:
    """torchrun exits non-zero once its own restarts are spent: that failure is final (a TrainJob
    backend says so itself). Killed by a signal (this pod stopped), it is not."""
    from components.common.attempts import FinalError
    from components.train.launch import LaunchError

    try:
        yield
    except LaunchError as exc:
        if launcher == "local" and (exc.exit_status or 0) > 0:
            raise FinalError(str(exc), exc.exit_status) from exc
        raise


def launch_backend(launcher: str, cluster_target: str):
    """The launcher's backend: None runs torchrun in this task's pod; ``trainjob`` a Kubeflow
    Trainer TrainJob placed by ``cluster_target``."""
    if launcher != "trainjob":
        return None
    from kube.client import TrainJobBackend

    return TrainJobBackend.from_cluster_target(cluster_target)


def warm_start_outcome(asked: bool, model_name: str, champion, trained: dict | None) -> dict:
    """What training started from (:func:`pipelines.finalize.warm_start_record`), also said on
    the run's progress log."""
    from components.common.progress import PROGRESS, get_logger
    from pipelines.finalize import warm_start_record

    warm = warm_start_record(asked, model_name, champion, trained)
    get_logger("components.train").log(PROGRESS, "warm start: %s", warm["line"])
    return warm
