"""The local container engine: docker or podman, whichever answers (a docker CLI without a daemon
is common, so being on PATH proves nothing). Used by ``make images``' checks, the images
benchmark and ``make run RUNNER=docker`` (:mod:`pipelines.task_containers`).

Podman on machines whose defaults it cannot run with takes ``images/containers.conf`` through
``CONTAINERS_CONF`` (runtime runc, ulimits the machine allows).
"""

from __future__ import annotations

import os
import shutil
import subprocess

ENGINES = ("docker", "podman")
ENGINE_ENV = "CONTAINER_ENGINE"
PODMAN_SETTINGS = "images/containers.conf"


class ContainerError(RuntimeError):
    """A container the engine would not start, with the engine's own words and, where known, the
    fix."""


def start_failure(engine_name: str, name: str, stderr: str) -> ContainerError:
    """The one-line error for an engine that refused to start container ``name``."""
    said = " ".join(stderr.split()) or "no message"
    hint = (
        f"; podman's defaults exceed what this machine allows: rerun with "
        f"CONTAINERS_CONF={PODMAN_SETTINGS}"
        if engine_name == "podman" and "rlimit" in said and not os.environ.get("CONTAINERS_CONF")
        else ""
    )
    return ContainerError(f"{engine_name} could not start container {name}: {said[-400:]}{hint}")


def engine(environ: dict[str, str] | None = None) -> str | None:
    """The first of ``$CONTAINER_ENGINE`` (alone, when set) or docker, podman whose ``info``
    succeeds; None when none does."""
    env = os.environ if environ is None else environ
    forced = env.get(ENGINE_ENV)
    for candidate in [forced] if forced else ENGINES:
        if not shutil.which(candidate):
            continue
        try:
            answered = (
                subprocess.run(
                    [candidate, "info"], capture_output=True, check=False, timeout=60
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            answered = False
        if answered:
            return candidate
    return None


# ----------------------------------------------------------------------------- what a cluster gives


def trainjob_node_env(job: dict, rank: int, port: int, master: str = "127.0.0.1") -> dict[str, str]:
    """The environment of node ``rank`` of a TrainJob: its rendered ``env`` plus what Kubeflow
    Trainer's torch plugin injects into the ``node`` container (trainer v2.3.0
    ``pkg/runtime/framework/plugins/torch/torch.go``): ``PET_NNODES`` (numNodes),
    ``PET_NPROC_PER_NODE`` (numProcPerNode), ``PET_NODE_RANK`` (the Job completion index),
    ``PET_MASTER_ADDR`` (node 0's pod; ``master`` here) and ``PET_MASTER_PORT``."""
    trainer = job["spec"]["trainer"]
    return {
        **{e["name"]: e["value"] for e in trainer.get("env") or []},
        "PET_NNODES": str(trainer["numNodes"]),
        "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(port),
    }


def expand(arg: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion of a container's command and args."""
    import re

    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), arg)


class Containers:
    """Containers started for one check or measurement, removed together afterwards."""

    def __init__(self, engine_name: str, volume: str, mount: str) -> None:
        self.engine, self.volume, self.mount = engine_name, volume, mount
        self.names: list[str] = []

    def start(
        self,
        name: str,
        image: str,
        argv: list[str],
        env: dict[str, str],
        network: str | None = None,
        read_only: bool = False,
        memory: str | None = None,
    ) -> str:
        """``argv`` (``$(VAR)`` expanded from ``env``) in a detached container of ``image``, as the
        image's user, with the volume at the fixed mount path; returns the name."""
        argv = [expand(a, env) for a in argv]
        command = [
            self.engine, "run", "-d", "--name", name, "-v", f"{self.volume}:{self.mount}",
            *(["--network", network] if network else []),
            *(["--read-only", "--tmpfs", "/tmp"] if read_only else []),
            *(["--memory", memory.replace("Gi", "g").replace("Mi", "m")] if memory else []),
            *(arg for k, v in sorted(env.items()) for arg in ("-e", f"{k}={v}")),
            "--entrypoint", argv[0], image, *argv[1:],
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise start_failure(self.engine, name, done.stderr)
        self.names.append(name)
        return name

    def inspect(self, name: str, field: str) -> str:
        """One field of ``engine inspect`` (a Go template such as ``{{.State.Running}}``)."""
        done = subprocess.run(
            [self.engine, "inspect", "-f", field, name], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    def address(self, name: str) -> str:
        """The container's address on the engine's network (as a pod's IP)."""
        return self.inspect(name, "{{.NetworkSettings.IPAddress}}")

    def wait(self, names: list[str], timeout: float = 900) -> list[int]:
        codes = []
        for name in names:
            done = subprocess.run(
                [self.engine, "wait", name], capture_output=True, text=True, timeout=timeout
            )
            codes.append(int(done.stdout.strip().splitlines()[-1]))
        return codes

    def running(self, name: str) -> bool:
        return self.inspect(name, "{{.State.Running}}") == "true"

    def kill(self, name: str) -> None:
        subprocess.run([self.engine, "kill", name], check=True, capture_output=True)

    def close(self) -> str:
        """Remove every container started; their logs' tails, for a failure message."""
        text = []
        for name in self.names:
            done = subprocess.run([self.engine, "logs", name], capture_output=True, text=True)
            text.append(f"--- {name}\n{(done.stdout + done.stderr)[-2000:]}")
            subprocess.run([self.engine, "rm", "-f", name], capture_output=True)
        self.names = []
        return "\n".join(text)

    def trainjob_nodes(self, job: dict, port: int, image: str, tag: str) -> list[str]:
        """Every node of a rendered TrainJob as a container on the host's network (pods of a
        cluster reach each other; here node 0 listens on this machine)."""
        trainer = job["spec"]["trainer"]
        return [
            self.start(
                f"dailyrec-node-{rank}-{tag}",
                image,
                [*trainer["command"], *trainer["args"]],
                trainjob_node_env(job, rank, port),
                network="host",
            )
            for rank in range(trainer["numNodes"])
        ]

    def daskcluster(self, spec: dict, tag: str) -> tuple[str, list[str]]:
        """A rendered DaskCluster's scheduler and workers as containers, each with its own address
        on the engine's network as pods have; returns (scheduler URL, worker names). A worker gets
        what the operator adds (``DASK_WORKER_NAME``, ``DASK_SCHEDULER_ADDRESS``)."""

        def container(role: str) -> tuple[dict, dict[str, str], str | None]:
            c = spec["spec"][role]["spec"]["containers"][0]
            env = {e["name"]: e["value"] for e in c.get("env") or []}
            memory = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            return c, env, memory

        sched, env, memory = container("scheduler")
        scheduler = self.start(
            f"dailyrec-dask-scheduler-{tag}",
            sched["image"],
            [*sched["command"], *sched.get("args", [])],
            env,
            read_only=True,
            memory=memory,
        )
        url = f"tcp://{self.address(scheduler)}:8786"
        worker, env, memory = container("worker")
        workers = []
        for i in range(spec["spec"]["worker"]["replicas"]):
            name = f"dailyrec-dask-worker-{i}-{tag}"
            workers.append(
                self.start(
                    name,
                    worker["image"],
                    [*worker["command"], *worker.get("args", [])],
                    {**env, "DASK_WORKER_NAME": name, "DASK_SCHEDULER_ADDRESS": url},
                    read_only=True,
                    memory=memory,
                )
            )
        return url, workers
