"""Batch scoring of one raw-contract day with a registered model.

The day's files are listed, checked and split into pieces exactly as
preprocess does (:mod:`components.preprocess.raw`); each piece is a Dask task
that validates its rows with preprocess's :func:`clean_table` (a bad row is
quarantined with its reason, not fatal), builds the model inputs of the kept
rows from the version's snapshot (:func:`components.score.features.key_inputs`:
each row scored as the next event of its user, like an online request with
only ids) and writes its scores. Memory is bounded by one piece per worker.
The model is downloaded and verified against its registration digest; only
its weights (``weights_only``) and snapshot are read, no code from the
artifact store runs. Rows read = scored + quarantined, always; files not read
are listed with their reason. The output Parquet replaces ``out`` atomically.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from components.common import schema
from components.common.progress import compute_with_progress, get_logger
from components.score.config import ScoreConfig

log = get_logger(__name__)


def score_day(config: ScoreConfig) -> dict:
    """Score every valid row of the day; write ``out``; return the accounting."""
    import dask

    from components.common.integrity import open_model
    from components.common.tracking import default_tracking_uri
    from components.preprocess import raw as rawio
    from components.score.features import Layout

    started = time.perf_counter()
    client, name, version = open_model(config.tracking_uri or default_tracking_uri(), config.model)
    _check_after_window(client, name, version, config.date)
    fs, files, ignored = _day_files(config)
    pieces = rawio.plan_pieces(fs, files)
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="dailyrec-score-") as model_dir,
        tempfile.TemporaryDirectory(prefix=".score-", dir=out.parent) as parts,
    ):
        scorer, snapshot = _load_model(client, name, version, model_dir)
        log.info(
            "score: %d files, %d pieces of %s with models:/%s/%s",
            len(files),
            len(pieces),
            config.date,
            name,
            version,
        )
        tasks = [
            dask.delayed(_score_piece, pure=False)(
                fs, piece, i, scorer, snapshot, Layout.of(scorer.vocab), config, parts
            )
            for i, piece in enumerate(pieces)
        ]
        with dask.config.set(scheduler=config.scheduler, num_workers=config.workers):
            counts = compute_with_progress(tasks)
        written = _concat(sorted(Path(parts).glob("part-*.parquet")), out)
    result = _accounting(counts, written, ignored)
    result = {
        "model_uri": f"models:/{name}/{version}",
        "date": config.date.isoformat(),
        "out": str(out),
        **result,
        "seconds": round(time.perf_counter() - started, 3),
    }
    _add_auc(result, out)
    return result


def _check_after_window(client, name: str, version: str, date: dt.date) -> None:
    """Refuse a day inside the version's training window (a bad ``date`` for this model)."""
    from components.preprocess.errors import InputError

    window_end = trained_until(client, name, version)
    if window_end is not None and date <= window_end:
        # the snapshot holds each user's state at the window's end: rows of a day before it
        # would be scored with their own later events
        raise InputError(
            f"{date} is inside models:/{name}/{version}'s training window (up to "
            f"{window_end}): a version scores the days after its window; score "
            f"{window_end + dt.timedelta(days=1)} or later, or a version trained before "
            f"{date}"
        )


def _load_model(client, name: str, version: str, model_dir: str):
    """The version's scorer and its users' state, from a verified download into ``model_dir``."""
    from components.common.dataset import COUNT_STATE_FILE
    from components.common.integrity import WEIGHTS, verified_download
    from components.preprocess.errors import InputError
    from components.score.features import USER_STATE, Snapshot
    from components.train.inference import load_scorer

    local = verified_download(client, name, version, model_dir)
    scorer = load_scorer(local / WEIGHTS, threads=1)
    if not (local / "artifacts" / USER_STATE).is_file():
        raise InputError(
            f"models:/{name}/{version} carries no users' state (registered with "
            f"--no-user-state): batch scoring by ids needs them"
        )
    snapshot = Snapshot.load(
        local / "artifacts" / COUNT_STATE_FILE, local / "artifacts" / USER_STATE
    )
    return scorer, snapshot


def _add_auc(result: dict, out: Path) -> None:
    """The scored rows' AUC, when the day has labels of both kinds."""
    scored = result["rows"]["scored"]
    labels = pq.read_table(out, columns=["label", "score"]) if scored else None
    if labels is not None and 0 < pa.compute.sum(labels["label"]).as_py() < scored:
        from components.common.metrics import roc_auc

        result["auc"] = roc_auc(labels["score"].to_numpy(), labels["label"].to_numpy())


def _day_files(config: ScoreConfig) -> tuple[Any, list, list]:
    """(filesystem, files, ignored) of the day to score; refused without its folder or files."""
    from components.preprocess import raw as rawio
    from components.preprocess.errors import InputError

    ignored: list = []
    fs, days = rawio.list_days(config.raw, ignored)
    if config.date not in days:
        raise InputError(
            f"{config.raw!r}: no folder {schema.day_folder_name(config.date)!r} to score"
        )
    files = rawio.list_files(fs, {config.date: days[config.date]}, ignored)
    if not files:
        raise InputError(
            f"{config.raw!r}: {schema.day_folder_name(config.date)!r} holds no raw files"
        )
    return fs, files, ignored


def _accounting(counts: list[dict], written: int, ignored: list) -> dict:
    """The pieces' counts summed: rows read = scored + quarantined = written + quarantined, or
    the run fails (an internal invariant); the first examples and the files not read."""
    from components.preprocess import raw as rawio

    read = sum(c["read"] for c in counts)
    quarantined = Counter()
    for c in counts:
        quarantined.update(c["quarantined"])
    scored = sum(c["scored"] for c in counts)
    if read != scored + sum(quarantined.values()) or written != scored:
        raise RuntimeError(
            f"row accounting broken: read {read}, scored {scored}, written {written}, "
            f"quarantined {sum(quarantined.values())}"
        )
    return {
        "rows": {
            "read": read,
            "scored": scored,
            "quarantined": dict(sorted(quarantined.items())),
            "quarantined_total": sum(quarantined.values()),
        },
        "examples": [e for c in counts for e in c["examples"]][:5],
        "ignored": [{"path": rawio.printable_path(i.path), "reason": i.reason} for i in ignored],
    }


def trained_until(client, name: str, version: int) -> dt.date | None:
    """The last day of the version's training window (its ``window`` tag), if recorded."""
    from components.common.registry_read import window_end

    end = window_end(client.get_model_version(name, str(version)).tags)
    try:
        return dt.date.fromisoformat(end) if end else None
    except ValueError:
        return None  # registered by hand with a tag of its own: nothing to say


def _score_piece(
    fs, piece, index: int, scorer, snapshot, layout, config: ScoreConfig, parts: str
) -> dict:
    from components.preprocess import raw as rawio
    from components.preprocess.clean import REASONS, DayWindow, clean_table
    from components.score.features import key_inputs
    from components.train.inference import chunks, predict_logits, sigmoid
    from components.train.model import BATCH_KEYS

    table = rawio.read_piece(fs, piece)
    window = DayWindow.for_day(schema.epoch_day(config.date), config.max_skew_hours)
    clean, quarantine, reasons = clean_table(table, piece.file.index, piece.row_offset, window)
    keep = np.ones(table.num_rows, bool)
    keep[quarantine["row"].to_numpy(np.int64) - piece.row_offset] = False
    examples = (
        [
            f"{piece.file.relpath!r} row {int(g['row'].iloc[0])}: {r} in column {REASONS[r]!r}"
            for r, g in quarantine.groupby("reason", sort=False)
        ]
        if len(quarantine)
        else []
    )
    if len(clean):
        cols = {k: clean[k].to_numpy(np.int64) for k in ("user_key", "item_key", "cat_key", "ts")}
        arrays = key_inputs(
            cols["user_key"], cols["item_key"], cols["cat_key"], cols["ts"], snapshot, layout
        )
        arrays = {k: arrays[k] for k in BATCH_KEYS}
        score = sigmoid(
            predict_logits(scorer.model, chunks(arrays, len(clean), config.batch))
        ).astype(np.float32)
        kept = table.filter(pa.array(keep))
        frame = pa.table(
            {
                **{c: _as_read(kept, c) for c in ID_COLUMNS},
                "timestamp": pa.array(cols["ts"]),
                "label": pa.array(clean["label"].to_numpy(np.int8)),
                "score": pa.array(score),
                "file": pa.array([piece.file.relpath] * len(clean), pa.string()),
                "row": pa.array(np.flatnonzero(keep).astype(np.int64) + piece.row_offset),
            }
        )
        pq.write_table(frame, Path(parts) / f"part-{index:06d}.parquet")
    return {
        "read": table.num_rows,
        "scored": len(clean),
        "quarantined": {r: n for r, n in reasons.items() if n},
        "examples": examples,
    }


ID_COLUMNS = (schema.USER_ID, schema.ITEM_ID, schema.CATEGORY_ID)
"""Written as the day's files hold them, so scores join back to the input."""


def _as_read(table: pa.Table, column: str) -> pa.Array:
    """An id column as read (dictionary-encoded ones decoded); text where the file has none."""
    if column not in table.column_names:
        return pa.nulls(table.num_rows, pa.string())
    array = table.column(column).combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array.cast(pa.string()) if pa.types.is_large_string(array.type) else array


def _id_type(types: set) -> pa.DataType:
    """One type for an id column whose files disagree: text (as the ids print), else theirs."""
    known = {t for t in types if not pa.types.is_null(t)}
    return known.pop() if len(known) == 1 else pa.string()


def _concat(parts: list[Path], out: Path) -> int:
    """Stream the part files into ``out`` (written beside it, then renamed): one part in memory at a
    time. Each id column keeps the type the day's files gave it; files that disagree give text."""
    read = [pq.read_schema(part) for part in parts]
    ids = [(c, _id_type({s.field(c).type for s in read})) for c in ID_COLUMNS]
    schema_ = pa.schema(
        [
            *ids,
            ("timestamp", pa.int64()),
            ("label", pa.int8()),
            ("score", pa.float32()),
            ("file", pa.string()),
            ("row", pa.int64()),
        ]
    )
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    rows = 0
    try:
        with pq.ParquetWriter(tmp, schema_, compression="zstd") as writer:
            for part in parts:
                table = pq.read_table(part).cast(schema_)
                writer.write_table(table)
                rows += table.num_rows
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return rows


def summary_line(result: dict) -> str:
    rows = result["rows"]
    auc = f"; AUC {result['auc']:.4f}" if "auc" in result else ""

    return (
        f"{result['date']}: read {rows['read']:,} rows, scored {rows['scored']:,}, quarantined "
        f"{rows['quarantined_total']:,}{auc} -> {result['out']} ({result['model_uri']}, "
        f"{result['seconds']:.1f}s)"
    )
