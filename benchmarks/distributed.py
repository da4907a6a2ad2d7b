"""The cluster's engines in containers on one machine: preprocess on 1 vs 2 Dask worker containers
of the rendered DaskCluster, and training on 1 node x 2 processes vs 2 node containers x 1 process
of the rendered TrainJob, same input and global batch (``make bench-distributed``, after
``make images``; docs/containers.md).

    python -m benchmarks.distributed [--results PATH] [--no-readme]
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.measure import machine
from benchmarks.readme import measurement_main
from components.common.train_summary import TrainSummary
from pipelines.containers import ContainerError

EVENTS_PER_DAY, DAYS = 40_000, 6
WINDOW = {"days": 4, "history_days": 1, "seq_len": 8}
PLAN = {"model": "debug", "micro_batch": 256, "num_workers": 0, "lr": 3e-3, "eval_batch": 2048}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def volume(folder: Path) -> Path:
    from components.datagen.config import DatagenConfig
    from components.datagen.generator import generate

    generate(
        DatagenConfig(
            out=folder / "raw", days=DAYS, users=2000, items=5000, events_per_day=EVENTS_PER_DAY
        )
    )
    (folder / "datasets").mkdir()
    (folder / "runs").mkdir()
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    return folder


def preprocess_on(engine: str, image: str, root: Path, workers: int, attempt: int = 0) -> dict:
    from kube.dask import cluster_spec
    from kube.types import MOUNT_PATH, DaskTarget
    from pipelines.containers import Containers

    spec = cluster_spec(
        "dailyrec-pre-bench",
        workers,
        DaskTarget(image=image, worker_cpu="1", worker_memory="3Gi"),
        run_id="bench",
    )
    spec = with_secret_values(spec, dict(os.environ))
    cluster = Containers(engine, str(root), MOUNT_PATH)
    try:
        url, _ = cluster.daskcluster(spec, uuid.uuid4().hex[:8])
        probe = (
            "import sys, distributed; c = distributed.Client(sys.argv[1], timeout=60); "
            f"c.wait_for_workers({workers}, timeout=180)"
        )
        subprocess.run([engine, "run", "--rm", image, "python", "-c", probe, url], check=True)
        out = f"{MOUNT_PATH}/datasets/w{workers}-{attempt}"
        argv = [
            "python", "-m", "components.preprocess", "--raw", f"{MOUNT_PATH}/raw", "--out", out,
            "--scheduler", url, "--days", str(WINDOW["days"]),
            "--history-days", str(WINDOW["history_days"]), "--seq-len", str(WINDOW["seq_len"]),
        ]  # fmt: skip
        started = time.perf_counter()
        task = cluster.start(f"dailyrec-task-{workers}-{uuid.uuid4().hex[:6]}", image, argv, {})
        (code,) = cluster.wait([task])
        seconds = time.perf_counter() - started
    finally:
        logs = cluster.close()
    if code != 0:
        raise SystemExit(f"distributed: preprocess on {workers} worker(s) failed:\n{logs}")
    from components.common.dataset_meta import DatasetMeta

    meta = DatasetMeta.read(root / "datasets" / f"w{workers}-{attempt}", splits=())
    return {"workers": workers, "seconds": round(seconds, 1), "fingerprint": meta.fingerprint}


def train_on(engine: str, image: str, root: Path, nnodes: int, nproc: int) -> dict:
    from components.common.plan import TrainPlan, write_plan
    from components.train.backend import LaunchSpec
    from kube.trainjob import build_trainjob
    from kube.types import MOUNT_PATH, TrainJobTarget
    from pipelines.containers import Containers

    name = f"{nnodes}x{nproc}"
    plan = TrainPlan(**PLAN, max_epochs=2, nnodes=nnodes, nproc_per_node=nproc)
    write_plan(root / "runs" / f"{name}.json", plan)
    (root / "runs" / f"{name}.json").chmod(0o666)
    spec = LaunchSpec.of(
        data=f"{MOUNT_PATH}/datasets/w2-0",
        out=f"{MOUNT_PATH}/runs/{name}",
        plan=f"{MOUNT_PATH}/runs/{name}.json",
    )
    job = build_trainjob(spec, plan, TrainJobTarget(image=image))
    nodes = Containers(engine, str(root), MOUNT_PATH)
    try:
        started = time.perf_counter()
        codes = nodes.wait(nodes.trainjob_nodes(job, free_port(), image, uuid.uuid4().hex[:8]))
        seconds = time.perf_counter() - started
    finally:
        logs = nodes.close()
    if codes != [0] * nnodes:
        raise SystemExit(f"distributed: training on {name} failed:\n{logs}")
    summary = TrainSummary.read(root / "runs" / name)
    return {
        "nodes": nnodes,
        "processes_per_node": nproc,
        "seconds": round(seconds, 1),
        "samples_per_s": round(summary.samples_per_s),
        "best_val_auc": round(summary.best_val_auc, 4),
    }


def measure() -> dict:
    from pipelines.containers import engine as answering

    engine = answering()
    if engine is None:
        raise SystemExit("distributed: no container engine answers (install docker or podman)")
    images = {k: f"localhost/dailyrec-{k}:dev" for k in ("runtime", "trainer")}
    with tempfile.TemporaryDirectory(prefix="dailyrec-distributed-") as tmp:
        root = volume(Path(tmp))
        # each twice, the faster kept: the first container start also warms the page cache
        preprocess_runs = [
            min(
                (preprocess_on(engine, images["runtime"], root, n, attempt) for attempt in (0, 1)),
                key=lambda run: run["seconds"],
            )
            for n in (1, 2)
        ]
        train_runs = [
            train_on(engine, images["trainer"], root, nnodes, nproc)
            for nnodes, nproc in ((1, 2), (2, 1))
        ]
    assert len({run["fingerprint"] for run in preprocess_runs}) == 1  # the same dataset either way
    return {
        "machine": machine(),
        "engine": engine,
        "events": EVENTS_PER_DAY * DAYS,
        "preprocess": preprocess_runs,
        "train": train_runs,
    }


def readme_table(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"Measured by `make bench-distributed` on {m['cpus']} cores ({m['cpu_model']}), "
        f"{m['memory_gib']} GiB RAM, with {result['engine']}: the rendered DaskCluster's and "
        f"TrainJob's containers of the local images, {result['events']:,} raw events.",
        "",
        "| preprocess (faster of two runs) | seconds | vs 1 worker |",
        "|---|---:|---:|",
    ]
    base = result["preprocess"][0]["seconds"]
    for run in result["preprocess"]:
        lines.append(
            f"| {run['workers']} Dask worker container(s), 1 thread each | {run['seconds']} "
            f"| {base / run['seconds']:.2f}x |"
        )
    lines += [
        "",
        "| training (global batch the same) | seconds | samples/s | best val AUC |",
        "|---|---:|---:|---:|",
    ]
    for run in result["train"]:
        lines.append(
            f"| {run['nodes']} node(s) x {run['processes_per_node']} process(es) | {run['seconds']} "
            f"| {run['samples_per_s']:,} | {run['best_val_auc']:.4f} |"
        )
    lines.append("")
    lines.append(
        "On one 2-core machine the containers share the same cores: these rows show that the "
        "distributed paths run and agree (bytes, AUC), not how they scale across machines."
    )
    return "\n".join(lines)


def with_secret_values(spec: dict, environ: dict[str, str]) -> dict:
    """A copy of a DaskCluster whose Secret-backed variables hold their values from ``environ``, as
    the kubelet fills them from the Secret (dropped where unset): to run the rendered pods as
    containers outside Kubernetes."""
    spec = json.loads(json.dumps(spec))
    for role in ("scheduler", "worker"):
        for container in spec["spec"][role]["spec"]["containers"]:
            resolved = []
            for entry in container.get("env") or []:
                if "secretKeyRef" not in (entry.get("valueFrom") or {}):
                    resolved.append(entry)
                elif environ.get(entry["name"]):
                    resolved.append({"name": entry["name"], "value": environ[entry["name"]]})
            container["env"] = resolved
    return spec


def main(argv: list[str] | None = None) -> int:
    try:
        return measurement_main("distributed", __doc__, measure, readme_table, argv)
    except ContainerError as exc:
        sys.exit(f"distributed: {exc}")


if __name__ == "__main__":
    sys.exit(main())
