"""KFP components of the preprocess stage: resolve the window (never cached), then build it (cacheable)."""

from typing import NamedTuple

from kfp import dsl

from components.common.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def resolve_window(
    raw_uri: str,
    storage_root: str,
    run_date: str,
    schedule_time: str,
    window_days: int,
    history_days: int,
    seq_len: int,
    run_id: str,
    kfp_run_id: str,
) -> NamedTuple(
    "Resolved",
    [
        ("raw_uri", str),
        ("data_dir", str),
        ("run_dir", str),
        ("run_id", str),
        ("end_date", str),
        ("input_fingerprint", str),
    ],
):
    """Which days to train on and the fingerprint of their files: the preprocess task's cache key.

    Cheap: lists the files and asks the filesystem what it vouches for about each
    (modification time, object checksum or ETag); reads no rows. Same files, window,
    config and code => the same key, the same dataset folder, a cached preprocess.

    Args:
        raw_uri: raw event logs (dt=YYYY-MM-DD/ folders); empty = storage_root/raw.
        storage_root: shared storage holding datasets/ and runs/.
        run_date: last day of the window, YYYY-MM-DD; overrides schedule_time.
        schedule_time: the run's schedule time (RFC 3339, UTC); the window ends the day before it.
            Empty or unresolved: the window ends on the latest day present.
        window_days: days in the window (train + 1 val + 1 test day).
        history_days: extra days read only to fill behaviour histories.
        seq_len: behaviour history length.
        run_id: folder name of this run under storage_root/runs; empty = kfp_run_id.
        kfp_run_id: the KFP run id.

    Returns:
        raw_uri: the raw event logs read.
        data_dir: the dataset folder for this key (datasets/<end date>-<digest of the key>).
        run_dir: this run's folder.
        run_id: this run's id (folder name under runs/).
        end_date: the window's last day, YYYY-MM-DD.
        input_fingerprint: the preprocess cache key (files, window, config, code).
    """
    from components.common.attempts import attempt, final_record
    from components.common.paths import inside, safe_name
    from components.common.runs import claim_run_dir, run_dir
    from pipelines.window import resolve_run_window

    # run_id comes from the run form: it must not name a folder outside the storage root
    rid = safe_name(run_id or kfp_run_id, "run_id")
    folder = claim_run_dir(
        inside(storage_root, run_dir(storage_root, rid), "run folder"), kfp_run_id
    )
    # bad input (no such days, an unreadable listing) fails every attempt alike: not retried
    with attempt(final_record(folder, "resolve-window"), "resolve-window"):
        return resolve_run_window(
            folder,
            rid,
            raw_uri=raw_uri,
            storage_root=storage_root,
            run_date=run_date,
            schedule_time=schedule_time,
            window_days=window_days,
            history_days=history_days,
            seq_len=seq_len,
        )


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def preprocess_op(
    raw_uri: str,
    data_dir: str,
    end_date: str,
    window_days: int,
    history_days: int,
    seq_len: int,
    input_fingerprint: str,
    dask_workers: int,
    cluster_target: str,
    dataset: dsl.Output[dsl.Dataset],
) -> NamedTuple("Preprocessed", [("seconds", float)]):
    """Dask preprocessing of the window into data_dir (a no-op when it already holds this fingerprint).

    The output is byte-identical with Dask threads here or a DaskCluster on Kubernetes.
    Takes only parameters: its KFP cache key must not change with per-run artifacts.

    Args:
        raw_uri: raw event logs (dt=YYYY-MM-DD/ folders).
        data_dir: the dataset folder, named by end date and cache key.
        end_date: last day of the window, YYYY-MM-DD.
        window_days: days in the window (train + 1 val + 1 test day).
        history_days: extra days read only to fill behaviour histories.
        seq_len: behaviour history length.
        input_fingerprint: the cache key resolved from the files; the dataset must match it.
        dask_workers: 0 = Dask threads in this task; N = a DaskCluster of N workers (cluster_target["dask"]).
        cluster_target: JSON of the cluster environment (Dask placement); empty locally.

    Returns:
        dataset: pointer to the dataset folder, with its fingerprint and rows per split.
        seconds: wall-clock seconds of this task.
    """
    import contextlib
    import dataclasses
    import datetime as dt
    import time
    from collections import namedtuple
    from pathlib import Path

    from components.common.attempts import attempt
    from components.common.dataset_meta import write_pointer
    from components.common.lock import TASK_WAIT_S, root_of, storage_lock
    from components.common.runs import point_latest
    from components.common.storage import disk_full_as
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import format_summary, preprocess
    from pipelines.window import check_unchanged

    started = time.perf_counter()
    config = PreprocessConfig(
        raw=raw_uri,
        out=data_dir,
        end_date=dt.date.fromisoformat(end_date),
        days=window_days,
        history_days=history_days,
        seq_len=seq_len,
    )
    cluster = contextlib.nullcontext(None)  # Dask threads in this task
    if dask_workers > 0:
        from kube.client import preprocess_cluster

        cluster = preprocess_cluster(cluster_target, dask_workers, config)
    # a dataset folder is shared by every run with the same cache key: one writer at a time
    final = Path(data_dir).with_name(f".{Path(data_dir).name}.final.json")
    with (
        attempt(final, "preprocess"),
        storage_lock(
            root_of(data_dir), Path(data_dir).name, stage="preprocess", wait_s=TASK_WAIT_S
        ),
        disk_full_as("preprocess", data_dir),
        cluster as address,
    ):
        meta = preprocess(dataclasses.replace(config, scheduler=address) if address else config)
    check_unchanged(meta.fingerprint, input_fingerprint, data_dir)
    print(format_summary(meta))
    point_latest(data_dir)  # datasets/latest: what the Katib experiment trains on
    dataset.metadata.update(write_pointer(dataset.path, meta, data_dir))
    return namedtuple("Preprocessed", ["seconds"])(time.perf_counter() - started)
