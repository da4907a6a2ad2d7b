"""KFP components of the preprocess stage: resolve the window (never cached), then build it (cacheable)."""

from typing import NamedTuple

from kfp import dsl

from pipelines.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def resolve_window(
    raw_uri: str, storage_root: str, run_date: str, window_days: int, history_days: int, seq_len: int,
    run_id: str, kfp_run_id: str,
) -> NamedTuple("Resolved", [("raw_uri", str), ("data_dir", str), ("run_dir", str), ("run_id", str),
                             ("end_date", str), ("input_fingerprint", str)]):
    """Which days to train on (run_date, or the latest day present) and the fingerprint of their files.

    Cheap (lists files, reads a MiB of each). The fingerprint is the preprocess
    task's cache key: same files, window, config and code => cached output.
    """
    import datetime as dt
    from collections import namedtuple

    from components.common.paths import inside, safe_name
    from components.common.runs import claim_run_dir, dataset_dir, run_dir
    from components.common.storage import atomic_write_json
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import resolve

    raw = raw_uri or f"{storage_root.rstrip('/')}/raw"
    end = dt.date.fromisoformat(run_date) if run_date else None
    config = PreprocessConfig(raw=raw, out=storage_root, end_date=end, days=window_days,
                              history_days=history_days, seq_len=seq_len)
    found = resolve(config)
    end_date = found.window.end.isoformat()
    # run_id comes from the run form: it must not name a folder outside the storage root
    rid = safe_name(run_id or kfp_run_id, "run_id")
    folder = claim_run_dir(inside(storage_root, run_dir(storage_root, rid), "run folder"), kfp_run_id)
    data = inside(storage_root, dataset_dir(storage_root, end_date), "dataset folder")
    atomic_write_json(folder / "run.json", {
        "run_id": rid, "raw_uri": raw, "data_dir": str(data), "end_date": end_date,
        "window_days": window_days, "history_days": history_days, "seq_len": seq_len,
        "input_fingerprint": found.fingerprint, "files": len(found.files)})
    print(f"run {rid}: window ending {end_date} ({len(found.files)} raw files), dataset {data}")
    out = namedtuple("Resolved", ["raw_uri", "data_dir", "run_dir", "run_id", "end_date", "input_fingerprint"])
    return out(raw, str(data), str(folder), rid, end_date, found.fingerprint)


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def preprocess_op(
    raw_uri: str, data_dir: str, end_date: str, window_days: int, history_days: int, seq_len: int,
    input_fingerprint: str, dask_workers: int, cluster_target: str, dataset: dsl.Output[dsl.Dataset],
) -> NamedTuple("Preprocessed", [("data_dir", str), ("seconds", float)]):
    """Dask preprocessing of the window into data_dir (a no-op when it already holds this fingerprint).

    dask_workers 0: Dask threads in this task; N > 0: a DaskCluster of N workers on Kubernetes
    (cluster_target["dask"]). The output is byte-identical either way.
    """
    import contextlib
    import dataclasses
    import datetime as dt
    import json
    import time
    from collections import namedtuple

    from components.common.lock import TASK_WAIT_S, root_of, storage_lock
    from components.common.storage import disk_full_as
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import format_summary, preprocess

    started = time.perf_counter()
    config = PreprocessConfig(raw=raw_uri, out=data_dir, end_date=dt.date.fromisoformat(end_date),
                              days=window_days, history_days=history_days, seq_len=seq_len)
    cluster = contextlib.nullcontext(None)  # Dask threads in this task
    if dask_workers > 0:
        from kube.client import preprocess_cluster

        cluster = preprocess_cluster(cluster_target, dask_workers, config)
    # datasets/<date> is shared by every run of that window: one writer at a time
    with storage_lock(root_of(data_dir), end_date, stage="preprocess", wait_s=TASK_WAIT_S), \
            disk_full_as("preprocess", data_dir), cluster as address:
        meta = preprocess(dataclasses.replace(config, scheduler=address) if address else config)
    if meta["fingerprint"] != input_fingerprint:
        raise RuntimeError(f"{data_dir}: fingerprint {meta['fingerprint'][:12]} differs from the resolved "
                           f"{input_fingerprint[:12]}: the raw files changed during the run")
    print(format_summary(meta))
    # the artifact is a pointer + summary; the arrays stay at data_dir
    with open(dataset.path, "w") as fh:
        json.dump({"uri": data_dir, "fingerprint": meta["fingerprint"], "splits": meta["splits"]}, fh)
    dataset.metadata.update({"uri": data_dir, "fingerprint": meta["fingerprint"],
                             **{f"{s}_rows": meta["splits"][s]["rows"] for s in ("train", "val", "test")}})
    return namedtuple("Preprocessed", ["data_dir", "seconds"])(data_dir, time.perf_counter() - started)
