"""Preprocess on a real distributed Dask cluster: the scheduler and workers started from the
containers of the DaskCluster spec the cluster task renders (``kube.dask.cluster_spec``), in the
runtime image, each with its own address on the engine's network as pods have theirs
(:meth:`pipelines.containers.Containers.daskcluster`: the rendered command, args, env and memory
limit, the shared volume, ``/tmp`` as scratch on a read-only root, what the operator adds). The
stage then connects as the cluster task does (``--scheduler tcp://…``), from a container of the
same image.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from benchmarks.distributed import with_secret_values
from components.datagen.config import DatagenConfig
from components.datagen.generator import generate
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import preprocess
from kube.dask import cluster_spec
from kube.types import MOUNT_PATH, DaskTarget
from pipelines.containers import Containers

pytestmark = pytest.mark.images
WINDOW = {"days": 4, "history_days": 1, "seq_len": 8}


def raw_volume(tmp_path, events_per_day: int):
    root = tmp_path / "volume"
    generate(
        DatagenConfig(out=root / "raw", days=6, users=300, items=500, events_per_day=events_per_day)
    )
    (root / "datasets").mkdir()
    for path in [root, *root.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    return root


def wait_for_workers(engine: str, image: str, url: str, count: int, timeout: float = 180):
    probe = (
        "import sys, distributed; c = distributed.Client(sys.argv[1], timeout=30); "
        f"c.wait_for_workers({count}, timeout={timeout}); print(len(c.scheduler_info()['workers']))"
    )
    done = subprocess.run(
        [engine, "run", "--rm", image, "python", "-c", probe, url],
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.split()[-1] == str(count), done.stderr[-2000:]


def task_argv(url: str, out: str) -> list[str]:
    """The preprocess stage as the cluster task runs it against its DaskCluster."""
    return [
        "python", "-m", "components.preprocess", "--raw", f"{MOUNT_PATH}/raw", "--out", out,
        "--scheduler", url, "--days", str(WINDOW["days"]),
        "--history-days", str(WINDOW["history_days"]), "--seq-len", str(WINDOW["seq_len"]),
    ]  # fmt: skip


def same_arrays(single, other) -> int:
    compared = 0
    for split in ("train", "val", "test"):
        for path in sorted((single / split).glob("*.npy")):
            assert path.read_bytes() == (other / split / path.name).read_bytes(), path
            compared += 1
    meta = json.loads((other / "meta.json").read_text())
    assert meta["fingerprint"] == json.loads((single / "meta.json").read_text())["fingerprint"]
    return compared


def started_cluster(engine, refs, root, workers: int = 2) -> tuple[Containers, str, list[str]]:
    target = DaskTarget(image=refs["runtime"], worker_cpu="1", worker_memory="2Gi")
    spec = cluster_spec("dailyrec-pre-test", workers, target, run_id="test")
    spec = with_secret_values(spec, dict(os.environ))
    cluster = Containers(engine, str(root), MOUNT_PATH)
    url, names = cluster.daskcluster(spec, uuid.uuid4().hex[:8])
    wait_for_workers(engine, refs["runtime"], url, workers)
    return cluster, url, names


def test_preprocess_on_the_rendered_daskcluster_writes_the_single_process_bytes(images, tmp_path):
    engine, refs = images
    root = raw_volume(tmp_path, 2000)
    cluster, url, _ = started_cluster(engine, refs, root)
    try:
        out = f"{MOUNT_PATH}/datasets/distributed"
        task = cluster.start(
            f"dailyrec-task-{uuid.uuid4().hex[:8]}", refs["runtime"], task_argv(url, out), {}
        )
        (code,) = cluster.wait([task], timeout=600)
    finally:
        logs = cluster.close()
    assert code == 0, logs
    single = tmp_path / "single"
    preprocess(PreprocessConfig(raw=str(root / "raw"), out=str(single), **WINDOW))
    assert same_arrays(single, root / "datasets" / "distributed") > 20


def test_a_worker_killed_mid_run_is_recovered_or_fails_the_stage_with_nothing_half_written(
    images, tmp_path
):
    engine, refs = images
    root = raw_volume(tmp_path, 40000)
    cluster, url, workers = started_cluster(engine, refs, root)
    out = root / "datasets" / "killed"
    try:
        task = cluster.start(
            f"dailyrec-task-{uuid.uuid4().hex[:8]}",
            refs["runtime"],
            task_argv(url, f"{MOUNT_PATH}/datasets/killed"),
            {},
        )
        deadline = time.monotonic() + 120
        while not any((root / "datasets").glob("killed*.tmp-*")):  # the stage is writing
            assert time.monotonic() < deadline and cluster.running(task), "the stage never started"
            time.sleep(0.1)
        assert cluster.running(task), "the stage ended before the kill: grow the input"
        cluster.kill(workers[1])
        (code,) = cluster.wait([task], timeout=900)
    finally:
        logs = cluster.close()
    print(f"worker killed mid-run: the stage {'recovered' if code == 0 else 'failed cleanly'}")
    if code == 0:  # Dask recomputed the lost worker's tasks on the other one
        single = tmp_path / "single"
        preprocess(PreprocessConfig(raw=str(root / "raw"), out=str(single), **WINDOW))
        assert same_arrays(single, out) > 20
    else:  # refused cleanly: no dataset, nothing a later run would take for one
        assert not (out / "meta.json").exists(), logs
        assert "Traceback" not in logs.split("--- dailyrec-task")[-1], logs
