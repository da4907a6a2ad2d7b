"""The preprocess stage: raw event logs -> validated, hashed, sequenced, split arrays.

Phases (each timed and shown with a progress bar):

1. scan      list the window's day folders, check every file's columns, plan pieces
             (Parquet row groups, CSV files), fingerprint inputs + config + code;
2. validate  Dask, one task per piece: parse, check, hash; cleaned rows to a
             staging Parquet, bad rows to ``quarantine/`` with their reason;
3. count     Dask sort by timestamp into time-ordered partitions, then partition
             after partition: drop exact duplicates, add the causal count
             features (``counts.py``), carrying the counts from one to the next;
4. sequence  Dask shuffle by user, then per partition: sort, build histories of
             clicks and of skipped exposures, split by day, write array shards;
5. assemble  concatenate shards into one ``.npy`` per array and split, with row
             offsets read from the shard files written (not partition counts).

Everything is written into a temp folder that replaces ``out`` only when
complete, and ``meta.json`` records the accounting: rows read = kept +
quarantined + exact duplicates dropped. ``count_state.npz`` holds the counts as
of the window's end and ``user_events/`` every kept row's keys (what a scorer needs
to continue them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from tqdm import tqdm

import components
from components.common import schema
from components.common.dataset import (
    COUNT_STATE_FILE,
    DENSE_FEATURES,
    FILES_KEY,
    SCHEMA_VERSION,
    SEAL_KEY,
    SPLITS,
    USER_EVENT_COLUMNS,
    USER_EVENTS_DIR,
    DatasetMismatch,
    array_specs,
    files_seal,
    record_files,
    verify_files,
)
from components.common.dataset_meta import META_FILE, DatasetMeta
from components.common.hashing import (
    KEY_ENV,
    IdKeyError,
    id_hash_key,
    is_public_key,
    key_fingerprint,
)
from components.common.progress import PhaseTimer, compute_with_progress, get_logger
from components.common.storage import atomic_dir, disk_full_as, remove_stale_temps
from components.preprocess import accounting
from components.preprocess import raw as rawio
from components.preprocess.clean import (
    CLEAN_COLUMNS,
    REASONS,
    DayWindow,
    clean_table,
)
from components.preprocess.config import GAP_EDGES_SECONDS, PreprocessConfig
from components.preprocess.counts import (
    GLOBAL_COLUMNS,
    NEVER_SECONDS,
    PRIOR_WEIGHT,
    CounterState,
)
from components.preprocess.errors import InputError
from components.preprocess.rows import model_inputs
from components.preprocess.sequences import (
    duplicate_mask,
    sort_order,
)
from components.preprocess.shuffle import bounded_disk_shuffle

HISTORY_ONLY = "history_only"
# What each sequence task reports about its shard.
SHARD_COUNTS = ("shard", HISTORY_ONLY, *SPLITS, *(f"{s}_positives" for s in SPLITS))
# Exact duplicates: rows equal in all of these (the day folder may differ).
DUPLICATE_KEY = ("user_key", "ts", "item_key", "cat_key", "label")

log = get_logger(__name__)


def _full_disk_named(stage):
    """``stage(config)`` with a full disk said as one :class:`NoSpaceError` naming the stage and
    the file (else the output folder), whichever write of it met the full disk."""

    @functools.wraps(stage)
    def run(config: PreprocessConfig) -> DatasetMeta:
        with disk_full_as("preprocess", config.out):
            return stage(config)

    return run


@_full_disk_named
def preprocess(config: PreprocessConfig) -> DatasetMeta:
    """Run the stage; return the dataset's ``meta.json``."""
    timer = PhaseTimer(log)
    out = Path(config.out)
    try:
        id_hash_key()
    except IdKeyError as exc:
        raise InputError(str(exc)) from None
    for stale in remove_stale_temps(out):
        log.info("removed leftover of an interrupted run: %r", str(stale))

    with timer.phase("scan"):
        found = resolve_inputs(config)
        fs, window, files, fingerprint = found.fs, found.window, found.files, found.fingerprint
        pieces = rawio.plan_pieces(fs, files)
        log.info(
            "%d files, %d pieces, window %s .. %s (+%d history days)",
            len(files),
            len(pieces),
            window.start,
            window.end,
            config.history_days,
        )

    cached = None if config.force else _up_to_date(out, fingerprint)
    if cached is not None:
        return cached
    if is_public_key():
        log.warning(
            "ids are hashed under the public default key ($%s unset): for generated data only; "
            "real logs need the deployment's secret (docs/security.md)",
            KEY_ENV,
        )

    with atomic_dir(out) as tmp, dask_scheduler(config.scheduler, config.workers):
        with timer.phase("validate"):
            counts = _validate(fs, pieces, window, config, tmp)
        with timer.phase("count"):
            duplicates = _count_features(counts, config, tmp)
            by_day = accounting.rows_by_day(counts, duplicates)
            accounting.check_duplicates(by_day, files, config.max_duplicate_fraction)
        with timer.phase("sequence"):
            rows_left = sum(c["staged"] for c in counts) - sum(duplicates.values())
            shard_counts = _sequence(rows_left, window, config, tmp)
        with timer.phase("assemble"):
            rows = _assemble(tmp, config)
        for scratch in ("_staging", "_counted", "_shards"):
            shutil.rmtree(tmp / scratch)
        meta = _build_meta(
            config, window, files, counts, duplicates, shard_counts, rows, fingerprint, timer
        )
        # of the training split: what the model standardizes the dense features with
        meta["dense_features"].update(dense_stats(tmp / "train" / "dense.npy"))
        meta["rows"]["by_day"] = by_day
        meta["inputs"]["ignored"] = [
            {"path": rawio.printable_path(i.path), "reason": i.reason} for i in found.ignored
        ]
        missing = window.missing_days({f.day for f in files})  # no folder, or no raw file in it
        meta["inputs"]["days_without_files"] = [d.isoformat() for d in missing]
        if missing:
            log.warning("no raw files for %s", ", ".join(map(str, missing)))
        _refuse_unusable_splits(meta["splits"], window, config.raw)
        meta[FILES_KEY] = record_files(tmp)
        sealed = files_seal(meta)  # under the deployment's secret: a rewrite cannot re-record
        if sealed:
            meta[SEAL_KEY] = sealed
        # read back as every later stage reads it: a document they would refuse is never written
        written = DatasetMeta.from_document(meta, out / META_FILE)
        written.write(tmp)
    log.info("wrote %r", str(out))
    return written


def _up_to_date(out: Path, fingerprint: str) -> DatasetMeta | None:
    """The dataset at ``out`` if it was built from these inputs and every file is as written."""
    existing = _read_meta(out)
    if not existing or existing.get("fingerprint") != fingerprint:
        return None
    try:
        verify_files(out, existing)
    except DatasetMismatch as exc:  # never train on a cached dataset changed since
        log.warning("not reusing the cached dataset: %s; building it again", exc)
        return None
    log.info(
        "%r is up to date (fingerprint %s, every file as written); nothing to do",
        str(out),
        fingerprint[:12],
    )
    return DatasetMeta.from_document(existing, out / META_FILE)


def _refuse_unusable_splits(splits: dict, window: Window, raw: str) -> None:
    """A split without rows, or of one label only, leaves no AUC, no early stop and no gate:
    refused now, naming the split's days."""
    for split in SPLITS:
        info = splits[split]
        if info["rows"] == 0:
            raise InputError(
                f"{raw!r}: the {split} split ({window.split_range(split)}) has no usable rows"
            )
        if info["positives"] in (0, info["rows"]):
            raise InputError(
                f"{raw!r}: the {split} split ({window.split_range(split)}) has "
                f"{info['rows']:,} rows and {'no' if info['positives'] == 0 else 'only'} "
                "clicks (label 1): were the labels logged? a model cannot be trained and "
                "judged on it"
            )


@dataclass(frozen=True)
class Resolved:
    """What a run would read: the window, its files, and the output's fingerprint."""

    fs: Any
    day_paths: dict
    window: Window
    files: list
    fingerprint: str
    """Of the input files (name, size, modification), the config and this code: equal => same output."""
    ignored: tuple = ()
    """Paths under the raw root not read (`raw.Ignored`: path and reason)."""


def resolve_inputs(config: PreprocessConfig) -> Resolved:
    """The window (``end_date`` or the latest day present) and its input files; cheap, reads no rows.

    Raises :class:`InputError` when the window has no files for a split.
    """
    ignored: list[rawio.Ignored] = []
    fs, day_paths = rawio.list_days(config.raw, ignored)
    window = Window(config.end_date or max(day_paths), config)
    rawio.check_misnamed_days(
        config.raw, ignored, window.first_read, window.end, open_ended=config.end_date is None
    )
    wanted = {d: p for d, p in day_paths.items() if window.first_read <= d <= window.end}
    files = rawio.list_files(fs, wanted, ignored)
    if not any(f.day >= window.start for f in files):
        raise InputError(
            f"{config.raw!r}: no raw files for the window {window.start} .. {window.end} "
            f"(day folders present: {min(day_paths)} .. {max(day_paths)})"
        )
    for split in SPLITS:
        if not any(window.split_of(f.day) == split for f in files):
            raise InputError(
                f"{config.raw!r}: no raw files for the {split} split ({window.split_range(split)})"
            )
    if not any(f.day == window.end for f in files):  # else the window silently ends a day early
        raise InputError(
            f"{config.raw!r}: no raw files for the window's last day {window.end} "
            f"(expected in {schema.day_folder_name(window.end)!r}"
            f"{'' if window.end in day_paths else ', which does not exist'})"
        )
    unexpected = [item for item in ignored if not item.marker]
    for item in unexpected[:20]:
        log.warning("not read: %r (%s)", item.path, item.reason)
    if len(unexpected) > 20:
        log.warning(
            "not read: %d more paths (listed in meta.json inputs.ignored)", len(unexpected) - 20
        )
    for item in ignored:
        if item.marker:
            log.info("passed over: %r (%s)", item.path, item.reason)
    return Resolved(
        fs,
        day_paths,
        window,
        files,
        _fingerprint(fs, files, config, window, ignored),
        tuple(ignored),
    )


class Window:
    """The days read, and which split each day belongs to."""

    def __init__(self, end: dt.date, config: PreprocessConfig) -> None:
        self.end = end
        self.start = end - dt.timedelta(days=config.days - 1)
        self.val_start = end - dt.timedelta(days=config.val_days + config.test_days - 1)
        self.test_start = end - dt.timedelta(days=config.test_days - 1)
        self.first_read = self.start - dt.timedelta(days=config.history_days)

    def split_of(self, day: dt.date) -> str | None:
        """The split a day's rows go to; None for look-back (history-only) days."""
        if day < self.start or day > self.end:
            return None
        return "test" if day >= self.test_start else "val" if day >= self.val_start else "train"

    def day_numbers(self) -> dict[str, int]:
        """First day number (days since epoch) of each split, for vectorized assignment."""
        return {
            "train": schema.epoch_day(self.start),
            "val": schema.epoch_day(self.val_start),
            "test": schema.epoch_day(self.test_start),
        }

    def split_range(self, split: str) -> str:
        bounds = {
            "train": (self.start, self.val_start - dt.timedelta(days=1)),
            "val": (self.val_start, self.test_start - dt.timedelta(days=1)),
            "test": (self.test_start, self.end),
        }[split]
        return f"{bounds[0]} .. {bounds[1]}"

    def missing_days(self, present: dict) -> list[dt.date]:
        days = (self.end - self.first_read).days + 1
        every = (self.first_read + dt.timedelta(days=i) for i in range(days))
        return [d for d in every if d not in present]


@contextlib.contextmanager
def dask_scheduler(name: str, workers: int | None):
    """Make ``name`` the Dask scheduler inside the block; yields a Client or None."""
    if name in ("threads", "processes", "sync"):
        with dask.config.set(scheduler=name, num_workers=workers):
            yield None
        return
    from distributed import Client, LocalCluster

    if name == "local-cluster":
        cluster = LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,
            dashboard_address=None,
            processes=True,
        )
        with cluster, Client(cluster) as client:
            yield client
        return
    with Client(name) as client:
        yield client


def _validate(fs, pieces, window: Window, config: PreprocessConfig, tmp: Path) -> list[dict]:
    (tmp / "_staging").mkdir()
    (tmp / "quarantine").mkdir()
    tasks = [
        dask.delayed(_validate_piece, pure=False)(fs, piece, i, config.max_skew_hours, tmp)
        for i, piece in enumerate(pieces)
    ]
    counts = compute_with_progress(tasks)
    here = key_fingerprint()
    elsewhere = sorted({c.pop("key") for c in counts} - {here})
    if elsewhere:  # e.g. Dask workers started without the deployment's Secret
        raise InputError(
            f"the Dask workers hash ids under key {elsewhere[0]}, this process under {here}: give "
            f"every worker the same ${KEY_ENV} (Secret dailyrec-id-key on the cluster)"
        )
    accounting.check_quarantine(counts, config.max_quarantine_fraction)
    return counts


def _validate_piece(fs, piece: rawio.Piece, index: int, max_skew_hours: float, tmp: Path) -> dict:
    """Clean one piece; write its kept and quarantined rows; return its counts."""
    table = rawio.read_piece(fs, piece)
    day = DayWindow.for_day(schema.epoch_day(piece.file.day), max_skew_hours)
    clean, quarantine, reasons = clean_table(table, piece.file.index, piece.row_offset, day)
    name = f"part-{index:06d}.parquet"
    if len(clean):
        clean.to_parquet(tmp / "_staging" / name, index=False)
    if len(quarantine):
        quarantine = quarantine.assign(file=piece.file.name)
        quarantine.to_parquet(tmp / "quarantine" / name, index=False)
    groups = list(quarantine.groupby("reason", sort=False)) if len(quarantine) else []
    examples = {
        r: f"{piece.file.relpath!r} row {int(g['row'].iloc[0])}: {r} in column {REASONS[r]!r} "
        f"(value {g[REASONS[r]].iloc[0]!r})"
        for r, g in groups
    }
    return {
        "file": piece.file.index,
        "day": piece.file.day.isoformat(),
        "read": table.num_rows,
        "staged": len(clean),
        "quarantined": {r: n for r, n in reasons.items() if n},
        "examples": examples,
        "values": {r: g[REASONS[r]].iloc[0] for r, g in groups},
        "key": key_fingerprint(),
    }


def _partitions(rows: int, config: PreprocessConfig) -> int:
    return max(1, -(-rows // config.rows_per_partition))


def _count_features(counts: list[dict], config: PreprocessConfig, tmp: Path) -> dict[str, int]:
    """Time-ordered partitions, then the count features partition after partition.

    Writes ``_counted/`` (the staged rows without exact duplicates, plus the
    item and category count columns and each row's ``prior``) and
    ``count_state.npz``; returns the exact duplicates dropped per day folder
    (ISO date -> rows).
    """
    staged = sorted((tmp / "_staging").glob("*.parquet"))
    if not staged:
        raise InputError(
            f"{config.raw!r}: every row in the window was quarantined; nothing to train on"
        )
    rows = sum(c["staged"] for c in counts)
    by_time = dd.read_parquet([str(p) for p in staged]).set_index(
        "ts", npartitions=_partitions(rows, config), shuffle_method="disk"
    )
    written = by_time.to_parquet(
        str(tmp / "_bytime"), compute=False, name_function=lambda i: f"part-{i:06d}.parquet"
    )
    with bounded_disk_shuffle(config.shuffle_buffer_mb << 20, tmp / "_spill"):
        compute_with_progress([written])
    (tmp / "_counted").mkdir()
    state, duplicates = CounterState(), Counter()
    parts = sorted((tmp / "_bytime").glob("part-*.parquet"))
    for path in tqdm(parts, desc="count", unit="partition", leave=False, disable=None):
        part = pd.read_parquet(path).reset_index()
        cols = {name: part[name].to_numpy(dtype=dtype) for name, dtype in CLEAN_COLUMNS.items()}
        order = np.lexsort(tuple(cols[k] for k in ("day", *reversed(DUPLICATE_KEY))))
        cols = {k: v[order] for k, v in cols.items()}
        dup = duplicate_mask(*(cols[k] for k in DUPLICATE_KEY))
        duplicates.update(dict(zip(*np.unique(cols["day"][dup], return_counts=True), strict=True)))
        cols = {k: v[~dup] for k, v in cols.items()}
        columns, prior = state.features(
            cols["item_key"], cols["cat_key"], cols["ts"], cols["label"]
        )
        frame = pd.DataFrame(cols)
        frame[list(GLOBAL_COLUMNS)] = columns
        frame["prior"] = prior
        frame.to_parquet(tmp / "_counted" / path.name, index=False)
    shutil.rmtree(tmp / "_bytime")
    np.savez(tmp / COUNT_STATE_FILE, **state.state_dict())
    return {accounting.day_of(day): int(n) for day, n in sorted(duplicates.items())}


def _sequence(rows: int, window: Window, config: PreprocessConfig, tmp: Path) -> pd.DataFrame:
    counted = sorted((tmp / "_counted").glob("*.parquet"))
    events = dd.read_parquet([str(p) for p in counted])
    partitions = _partitions(rows, config)
    by_user = events.shuffle(on="user_key", npartitions=partitions)
    meta = pd.DataFrame({k: pd.Series(dtype="int64") for k in SHARD_COUNTS})
    shards = by_user.map_partitions(
        _build_shard,
        shard_root=str(tmp / "_shards"),
        events_root=str(tmp / "events"),
        split_starts=window.day_numbers(),
        config=config,
        meta=meta,
    )
    (tmp / "_shards").mkdir()
    (tmp / "events").mkdir()
    (tmp / USER_EVENTS_DIR).mkdir()
    log.info("sequence: %d staged rows -> %d partitions by user", rows, partitions)
    with bounded_disk_shuffle(config.shuffle_buffer_mb << 20, tmp / "_spill"):
        (result,) = compute_with_progress([shards])
    return result.sort_values("shard").reset_index(drop=True)


def _build_shard(
    part: pd.DataFrame,
    shard_root: str,
    events_root: str,
    split_starts: dict,
    config: PreprocessConfig,
    partition_info=None,
) -> pd.DataFrame:
    """Sort, de-duplicate and sequence one partition of users; write its array shards."""
    number = partition_info["number"] if partition_info else 0
    cols = {name: part[name].to_numpy(dtype=dtype) for name, dtype in CLEAN_COLUMNS.items()}
    order = sort_order(
        cols["user_key"], cols["ts"], cols["item_key"], cols["cat_key"], cols["label"], cols["day"]
    )
    cols = {k: v[order] for k, v in cols.items()}
    arrays = model_inputs(
        cols,
        part[list(GLOBAL_COLUMNS)].to_numpy(np.float32)[order],
        part["prior"].to_numpy(np.float64)[order],
        config,
    )
    item, cat, hist_len = arrays["target_item"], arrays["target_cat"], arrays["hist_len"]
    day = cols["day"]
    split_code = np.full(len(day), -1, np.int8)  # -1 = history only
    for code, split in enumerate(SPLITS):
        split_code[day >= split_starts[split]] = code
    result = {"shard": number, HISTORY_ONLY: int((split_code < 0).sum())}
    for code, split in enumerate(SPLITS):
        mask = split_code == code
        result[split] = int(mask.sum())
        result[f"{split}_positives"] = int(cols["label"][mask].sum())
        if not result[split]:
            continue
        folder = Path(shard_root) / f"{number:06d}" / split
        folder.mkdir(parents=True)
        for name, values in arrays.items():
            np.save(folder / f"{name}.npy", values[mask])
    pd.DataFrame({k: cols[k] for k in USER_EVENT_COLUMNS}).to_parquet(
        Path(events_root).parent / USER_EVENTS_DIR / f"part-{number:06d}.parquet", index=False
    )
    in_window = split_code >= 0
    if in_window.any():
        pd.DataFrame(
            {
                "user_key": cols["user_key"][in_window],
                "user": arrays["user"][in_window],
                "item": item[in_window],
                "category": cat[in_window],
                "ts": cols["ts"][in_window],
                "label": cols["label"][in_window],
                "day": day[in_window],
                "split": np.asarray(SPLITS)[split_code[in_window]],
                "hist_len": hist_len[in_window],
            }
        ).to_parquet(Path(events_root) / f"part-{number:06d}.parquet", index=False)
    return pd.DataFrame([result])[list(SHARD_COUNTS)]


def _assemble(tmp: Path, config: PreprocessConfig) -> dict[str, int]:
    """One ``.npy`` per split and array, shards streamed in order (bounded memory)."""
    rows = {}
    specs = array_specs(config.seq_len, config.neg_len)
    shard_dirs = sorted((tmp / "_shards").iterdir())
    for split in SPLITS:
        (tmp / split).mkdir()
        parts = [d / split for d in shard_dirs if (d / split).is_dir()]
        for name, (dtype, tail) in tqdm(
            specs.items(), desc=f"assemble {split}", unit="array", leave=False, disable=None
        ):
            rows[split] = _concat_npy(
                [p / f"{name}.npy" for p in parts],
                tmp / split / f"{name}.npy",
                np.dtype(dtype),
                tail,
            )
    return rows


def dense_stats(path: Path, chunk: int = 1 << 18) -> dict[str, list[float]]:
    """Per-column mean and standard deviation of a ``[n, F]`` array file, read in chunks.

    Plain reads, not a memory map: mapped pages would count in the process's RSS and grow it
    with the dataset."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        (rows, width), _, dtype = read_header(fh)
        total, squares = np.zeros(width), np.zeros(width)
        for lo in range(0, rows, chunk):
            count = min(chunk, rows - lo) * width
            block = np.fromfile(fh, dtype=dtype, count=count).reshape(-1, width).astype(np.float64)
            total += block.sum(axis=0)
            squares += (block * block).sum(axis=0)
    n = max(rows, 1)
    mean = total / n
    std = np.sqrt(np.maximum(squares / n - mean * mean, 0.0))
    return {"mean": [round(float(v), 6) for v in mean], "std": [round(float(v), 6) for v in std]}


def _concat_npy(sources: list[Path], target: Path, dtype: np.dtype, tail: tuple[int, ...]) -> int:
    """Write the row-wise concatenation of ``.npy`` files without mapping them into memory."""
    headers = []
    for source in sources:
        with open(source, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, src_dtype = read_header(fh)
            if fortran or src_dtype != dtype or tuple(shape[1:]) != tail:
                raise RuntimeError(f"{source}: unexpected shard layout {shape} {src_dtype}")
            headers.append((source, fh.tell(), shape[0]))
    total = sum(n for _, _, n in headers)
    with open(target, "wb") as out:
        np.lib.format.write_array_header_1_0(
            out,
            {
                "descr": np.lib.format.dtype_to_descr(dtype),
                "fortran_order": False,
                "shape": (total, *tail),
            },
        )
        out.flush()
        for source, offset, _ in headers:
            with open(source, "rb") as fh:
                _copy_tail(fh, out, offset)
    return total


def _copy_tail(src, dst, offset: int) -> None:
    """Append ``src`` from ``offset`` to ``dst``: in the kernel where it can, else by chunks."""
    remaining = os.fstat(src.fileno()).st_size - offset
    try:
        while remaining > 0:
            copied = os.copy_file_range(src.fileno(), dst.fileno(), remaining, offset)
            if copied == 0:
                break
            offset += copied
            remaining -= copied
    except OSError:
        pass  # e.g. across filesystems on older kernels: fall through to a plain copy
    if remaining > 0:
        src.seek(offset)
        dst.seek(0, os.SEEK_END)
        shutil.copyfileobj(src, dst, length=1 << 22)


def _fingerprint(fs, files, config: PreprocessConfig, window: Window, ignored=()) -> str:
    inputs = [rawio.file_fingerprint(fs, f) for f in files]
    payload = {
        "schema_version": SCHEMA_VERSION,
        "id_key": key_fingerprint(),
        "inputs": inputs,
        "ignored": [[rawio.printable_path(i.path), i.reason] for i in ignored],
        "config": config.result_fields() | {"end_date": window.end.isoformat()},
        "code": code_fingerprint(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def code_fingerprint() -> str:
    """Hash of the source that shapes the output (this stage and the common modules it uses)."""
    digest = hashlib.sha256()
    root = Path(components.__file__).parent
    shared = [
        root / "common" / f"{name}.py" for name in ("schema", "hashing", "dataset", "dataset_meta")
    ]
    for path in sorted([*root.glob("preprocess/*.py"), *shared]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _read_meta(out: Path) -> dict | None:
    """The raw document of an earlier run's output, if any (checked for reuse: fingerprint, then
    every file's digest, then the schema)."""
    try:
        return json.loads((out / META_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _build_meta(
    config, window, files, counts, duplicates_per_day, shard_counts, rows, fingerprint, timer
) -> dict:
    read = sum(c["read"] for c in counts)
    quarantined = Counter()
    for c in counts:
        quarantined.update(c["quarantined"])
    duplicates = sum(duplicates_per_day.values())  # per day: meta["rows"]["by_day"]
    history_only = int(shard_counts[HISTORY_ONLY].sum())
    kept = {**{s: int(rows[s]) for s in SPLITS}, HISTORY_ONLY: history_only}
    accounted = sum(kept.values()) + sum(quarantined.values()) + duplicates
    if accounted != read:  # an internal invariant: a bug, not bad input
        raise RuntimeError(f"row accounting broken: read {read} != accounted {accounted}")
    splits = {}
    for split in SPLITS:
        positives = int(shard_counts[f"{split}_positives"].sum())
        splits[split] = {
            "rows": int(rows[split]),
            "positives": positives,
            "positive_rate": positives / rows[split] if rows[split] else 0.0,
            "days": window.split_range(split),
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "dailyrec_version": components.__version__,
        "fingerprint": fingerprint,
        "window": {
            "start": window.start.isoformat(),
            "end": window.end.isoformat(),
            "history_start": window.first_read.isoformat(),
            **{f"{s}_days": window.split_range(s) for s in SPLITS},
        },
        "config": config.result_fields() | {"end_date": window.end.isoformat()},
        "buckets": {
            "item": config.item_buckets,
            "category": config.category_buckets,
            "user": config.user_buckets,
            "gap": len(GAP_EDGES_SECONDS) + 2,
            "hash": "siphash24-utf8",
            "key_fingerprint": key_fingerprint(),
            "padding": 0,
        },
        "splits": splits,
        "seq_len": config.seq_len,
        "neg_len": config.neg_len,
        "context_features": {"hour": 24, "dow": 7},
        "dense_features": {
            "names": list(DENSE_FEATURES),
            "transforms": "log1p(count) for *_log_impressions/*_log_clicks; *_click_logit: "
            "logit((clicks + w * prior) / (impressions + w)), prior = click rate of "
            "all earlier rows; *_log_seconds_since_*: log1p(seconds), capped",
            "prior_weight": PRIOR_WEIGHT,
            "never_seconds": NEVER_SECONDS,
            "state": COUNT_STATE_FILE,
            "user_events": USER_EVENTS_DIR,
        },
        "arrays": {
            name: {"dtype": d, "row_shape": list(t)}
            for name, (d, t) in array_specs(config.seq_len, config.neg_len).items()
        },
        "rows": {
            "read": read,
            "kept": kept,
            "quarantined": dict(sorted(quarantined.items())),
            "quarantined_total": sum(quarantined.values()),
            "duplicates_dropped": duplicates,
        },
        "inputs": {"files": [f.name for f in files], "bytes": sum(f.size for f in files)},
        "seconds": dict(timer.seconds),
    }


def format_summary(meta: DatasetMeta) -> str:
    """A short human summary of a dataset's meta.json."""
    rows, window = meta.rows, meta.window
    lines = [
        f"dataset {window.start if window else '?'} .. {window.end if window else '?'} "
        f"(fingerprint {str(meta.fingerprint)[:12]})",
        f"  rows read {rows['read']:,}; quarantined {rows['quarantined_total']:,}; "
        f"exact duplicates dropped {rows['duplicates_dropped']:,}; "
        f"history-only {rows['kept'][HISTORY_ONLY]:,}",
    ]
    for split in SPLITS:
        info = meta.split(split)
        lines.append(
            f"  {split:5s} {info.rows:>12,} rows  positive rate "
            f"{info.positive_rate:.4f}  ({info.days})"
        )
    for reason, n in rows["quarantined"].items():
        lines.append(f"  quarantined {reason}: {n:,}")
    duplicated = {d: b["duplicates"] for d, b in rows.get("by_day", {}).items() if b["duplicates"]}
    if duplicated:
        lines.append(
            "  exact duplicates by day: " + ", ".join(f"{d} {n:,}" for d, n in duplicated.items())
        )
    ignored = [rawio.Ignored(i["path"], i["reason"]) for i in meta.inputs.get("ignored", [])]
    unexpected = [i for i in ignored if not i.marker]
    if unexpected:
        lines.append(
            f"  not read: {len(unexpected)} paths (meta.json inputs.ignored), e.g. "
            f"{unexpected[0].path!r} ({unexpected[0].reason})"
        )
    if len(ignored) > len(unexpected):
        lines.append(
            f"  passed over: {len(ignored) - len(unexpected)} hidden or marker paths "
            "(names starting with '.' or '_'; meta.json inputs.ignored)"
        )
    lines.append("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in meta.seconds.items()))
    return "\n".join(lines)
