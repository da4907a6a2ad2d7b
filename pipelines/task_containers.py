"""``make run RUNNER=docker``: the tasks of a kfp.local run in containers of the runtime image,
through kfp.local's ``DockerRunner``, with what a cluster gives a task's pod: the image's user,
the storage root at the fixed mount path, the environment from Secrets, and no more."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from components.common.attempts import RUN_ID_ENV
from components.common.lock import TOKEN_ENV
from components.common.monitoring import PUSHGATEWAY_ENV
from components.common.signing import SIGNING_KEY_ENV, VERIFY_KEY_ENV
from kube.types import ID_KEY_ENV, MOUNT_PATH

IMAGE_UID = 10001
"""The images' non-root user and group (``images/*/Dockerfile``)."""
RAW_MOUNT = "/mnt/raw"
"""Where a local raw folder appears, read-only, in a task's container."""
RUN_LABEL = "io.dailyrec.run"
"""Label of every task container of a local run (its value: the run id): what a stop removes."""
PASSED_ENV = (
    TOKEN_ENV,
    RUN_ID_ENV,
    SIGNING_KEY_ENV,
    VERIFY_KEY_ENV,
    ID_KEY_ENV["name"],
    PUSHGATEWAY_ENV,
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
)
"""What a task's container gets of this process's environment (where set): the run's lock token
(its tasks re-enter the run's lock) and what the cluster gives tasks from Secrets and labels."""


class ContainerRunError(RuntimeError):
    """The container engine or the image cannot run a local run's tasks; the message says what to do."""


def image_present(engine_name: str, image: str) -> bool:
    return (
        subprocess.run(
            [engine_name, "image", "inspect", image], capture_output=True, check=False
        ).returncode
        == 0
    )


def image_code_version(engine_name: str, image: str) -> str:
    """The code version (:func:`components.common.tracking.code_version`) built into ``image``."""
    script = "from components.common.tracking import code_version; print(code_version())"
    done = subprocess.run(
        [engine_name, "run", "--rm", "--network", "none", image, "python", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout else ""


@contextlib.contextmanager
def docker_api(engine_name: str) -> Iterator[None]:
    """``$DOCKER_HOST`` for the docker SDK that kfp.local's DockerRunner uses, for the block: docker's
    own; for podman, its Docker-compatible API (``podman system service``) on a socket of its own."""
    if engine_name != "podman":
        yield
        return
    folder = Path(tempfile.mkdtemp(prefix="dailyrec-podman-", dir="/tmp"))  # short: a socket path
    socket = folder / "api.sock"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    previous = os.environ.get("DOCKER_HOST")
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                raise ContainerRunError(
                    f"podman system service did not start: {(service.stderr.read() or '').strip()[-500:]}"
                )
            time.sleep(0.1)
        os.environ["DOCKER_HOST"] = f"unix://{socket}"
        yield
    finally:
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
        service.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            service.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def share_storage(root: Path) -> int:
    """Make the folders a run writes (``runs/``, ``datasets/``) writable by the images' user, as
    Kubernetes' ``fsGroup`` does a pod's volume: group-owned by the group the containers run with
    (the images' group where this process may change groups, else the root's own group, which the
    containers then join), group read-write, folders setgid so what is created inside keeps the
    group. Returns that group."""
    gid = IMAGE_UID if os.geteuid() == 0 else root.stat().st_gid
    for top in (root / "runs", root / "datasets"):
        top.mkdir(parents=True, exist_ok=True)
        for path in [top, *top.rglob("*")]:
            with contextlib.suppress(OSError):  # not ours: a container made it, and can write it
                stat = path.lstat()
                if path.is_symlink():
                    continue
                if stat.st_gid != gid:
                    os.chown(path, -1, gid)
                directory = 0o2070 if path.is_dir() else 0o060
                if stat.st_mode & directory != directory:
                    os.chmod(path, stat.st_mode | directory)
    return gid


@contextlib.contextmanager
def group_writable() -> Iterator[None]:
    """For the block, what this process creates is group-writable (umask 002): KFP's local runner
    makes the tasks' output folders on this side, and the containers' user writes into them."""
    previous = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(previous)


def task_runner(root: Path, raw: str, run_id: str, gid: int, network: bool):
    """kfp.local's ``DockerRunner`` for the tasks of run ``run_id``: as the images' user (joining the
    storage group ``gid``), the storage root at the cluster's mount path, a local raw folder read-only
    at :data:`RAW_MOUNT`, the environment of :data:`PASSED_ENV`, no network unless ``network`` (a
    remote tracking server or raw store), labelled for :func:`stop_run`."""
    from docker.types import Mount
    from kfp import local

    mounts = [Mount(target=MOUNT_PATH, source=str(root), type="bind")]
    if "://" not in raw:
        mounts.append(Mount(target=RAW_MOUNT, source=raw, type="bind", read_only=True))
    return local.DockerRunner(
        user=f"{IMAGE_UID}:{IMAGE_UID}",
        group_add=[str(gid)],
        mounts=mounts,
        environment={k: os.environ[k] for k in PASSED_ENV if os.environ.get(k)},
        network_mode="host" if network else "none",
        labels={RUN_LABEL: run_id},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
    )


def run_task_container(client, image: str, command: list[str], volumes: dict, **run_args) -> int:
    """One task's container, as kfp.local's ``run_docker_container`` runs it (its logs streamed to
    stdout), but removed only after its exit code is read: kfp.local starts it with
    ``auto_remove=True`` and takes a container already gone for exit code 0, so a task that failed
    quickly counted as a success."""
    container = client.containers.run(
        image=image, command=command, detach=True, volumes=volumes, **run_args
    )
    try:
        for line in container.logs(stream=True, follow=True):
            print(line.decode(errors="replace"), end="")
        return int(container.wait()["StatusCode"])
    finally:
        with contextlib.suppress(Exception):  # already removed by a stop
            container.remove(force=True)


@contextlib.contextmanager
def exit_codes_kept() -> Iterator[None]:
    """For the block, kfp.local's DockerRunner runs each task with :func:`run_task_container`."""
    from kfp.local import docker_task_handler

    original = docker_task_handler.run_docker_container
    docker_task_handler.run_docker_container = run_task_container
    try:
        yield
    finally:
        docker_task_handler.run_docker_container = original


def stop_run(engine_name: str, run_id: str, grace_s: float = 10.0) -> list[str]:
    """Stop the task containers of run ``run_id`` as a pod is stopped: SIGTERM to the task's
    processes (the shell KFP starts them from is PID 1 and passes no signal on), SIGKILL after
    ``grace_s``; then remove them. Returns their ids."""
    listed = subprocess.run(
        [engine_name, "ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}"],
        capture_output=True,
        text=True,
        check=False,
    )
    ids = listed.stdout.split()
    for cid in ids:  # kill -1: every process of the container's user but PID 1 and itself
        subprocess.run(
            [engine_name, "exec", cid, "sh", "-c", "kill -TERM -1"],
            capture_output=True,
            check=False,
            timeout=30,
        )
    if ids:
        subprocess.run(
            [engine_name, "stop", "-t", str(int(grace_s)), *ids], capture_output=True, check=False
        )
        subprocess.run([engine_name, "rm", "-f", *ids], capture_output=True, check=False)
    return ids
