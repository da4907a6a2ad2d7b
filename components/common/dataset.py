"""The Dataset contract between preprocess (writer) and train/evaluate (readers).

Kept here, free of Dask, so a training process does not import the
preprocessing stack to learn the array layout.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

SCHEMA_VERSION = 2
"""2: dense count features (``dense``) and the recent skipped exposures (``neg_*``)."""
SPLITS = ("train", "val", "test")


class DatasetError(ValueError):
    """A dataset folder that does not match the Dataset contract; the message names the file."""


GLOBAL_ENTITIES = ("item", "category")
"""Entities counted across all users (in time order, with state carried between partitions)."""
USER_ENTITIES = ("user", "user_category", "user_item")
"""Entities within one user's rows: the user, the user in one category, the user with one item."""
COUNT_ENTITIES = (*GLOBAL_ENTITIES, *USER_ENTITIES)
COUNT_STATS = ("log_impressions", "log_clicks", "click_logit")
RECENCY_EVENTS = ("exposure", "click")
COUNT_STATE_FILE = "count_state.npz"
"""The item and category counts at the end of the window, in the dataset folder: with ``USER_EVENTS_DIR``, what
a scorer's snapshot is built from (and the snapshot file's name among a model's artifacts)."""
USER_EVENTS_DIR = "user_events"
"""Folder of Parquet parts in the dataset: every kept row's keys, look-back days included."""
USER_EVENT_COLUMNS = ("user_key", "item_key", "cat_key", "ts", "label")
"""The columns of ``USER_EVENTS_DIR``'s parts, and of the events a scorer's snapshot keeps."""
DENSE_FEATURES: tuple[str, ...] = (
    *(f"{entity}_{stat}" for entity in COUNT_ENTITIES for stat in COUNT_STATS),
    *(
        f"{entity}_log_seconds_since_{event}"
        for entity in USER_ENTITIES
        for event in RECENCY_EVENTS
    ),
)
"""Columns of the ``dense`` array, in order (how each is computed: components/preprocess/counts.py)."""


def array_specs(seq_len: int, neg_len: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Name -> (dtype, per-row shape) of every per-split array (the Dataset contract)."""
    return {
        "hist_item": ("int32", (seq_len,)),
        "hist_cat": ("int32", (seq_len,)),
        "hist_gap": ("uint8", (seq_len,)),
        "hist_len": ("int16", ()),
        "neg_item": ("int32", (neg_len,)),
        "neg_cat": ("int32", (neg_len,)),
        "neg_gap": ("uint8", (neg_len,)),
        "neg_len": ("int16", ()),
        "dense": ("float32", (len(DENSE_FEATURES),)),
        "target_item": ("int32", ()),
        "target_cat": ("int32", ()),
        "user": ("int32", ()),
        "user_key": ("int64", ()),
        "context": ("uint8", (2,)),
        "ts": ("int64", ()),
        "label": ("uint8", ()),
    }


KEY_DIGEST_CHARS = 12
"""Hex digits of the cache key in a dataset folder's name."""


class DatasetMismatch(RuntimeError):
    """A dataset folder does not hold the dataset its pointer says (one line, naming the folder)."""


def folder_name(end_date: str, fingerprint: str) -> str:
    """``<end date>-<digest>``: one folder per preprocess cache key (inputs, window, config, code), so
    two configurations of the same window never share (and overwrite) one folder."""
    if len(fingerprint) < KEY_DIGEST_CHARS or not all(c in "0123456789abcdef" for c in fingerprint):
        raise ValueError(f"fingerprint {fingerprint!r}: expected a hex digest")
    return f"{end_date}-{fingerprint[:KEY_DIGEST_CHARS]}"


FILES_KEY = "files"
"""meta.json's record of every file the dataset holds: relative path -> {bytes, sha256}."""


SEAL_KEY = "files_seal"
"""meta.json's seal of its ``files`` and ``fingerprint``, under the deployment's id secret."""


def files_seal(meta: dict) -> str | None:
    """The seal meta.json's record of its files must carry (:func:`~components.common.hashing.seal`):
    one who can rewrite the arrays and their digests but holds no secret cannot make it."""
    from components.common.hashing import seal

    record = {"fingerprint": meta.get("fingerprint"), FILES_KEY: meta.get(FILES_KEY)}
    return seal(json.dumps(record, sort_keys=True).encode())


def file_digest(path: str | Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def record_files(data_dir: str | Path) -> dict[str, dict]:
    """Size and SHA-256 of every file under a dataset folder but meta.json (written at the end),
    for meta.json's ``files``: what :func:`verify_files` checks before the dataset is used."""
    root = Path(data_dir)
    return {
        p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": file_digest(p)}
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).as_posix() != "meta.json"
    }


def verify_files(data_dir: str | Path, meta: dict, content: bool = True) -> None:
    """Every file meta.json records is there, as written (size, then SHA-256 unless not
    ``content``: the cheap check of every load), and no other file is (a dataset changed after
    preprocess wrote it is refused); :class:`DatasetMismatch` names the file."""
    root = Path(data_dir)
    recorded = meta.get(FILES_KEY)
    if not isinstance(recorded, dict) or not recorded:
        raise DatasetMismatch(
            f"{root}: meta.json records no file digests (written by an older preprocess); "
            "preprocess the window again"
        )
    expected = files_seal(meta)
    if expected is not None and not hmac.compare_digest(str(meta.get(SEAL_KEY) or ""), expected):
        raise DatasetMismatch(
            f"{root / 'meta.json'}: its record of the files is not sealed under this deployment's "
            "id secret (written without it, or rewritten since); preprocess the window again (force)"
        )
    present = {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).as_posix() != "meta.json"
    }
    extra = sorted(present - set(recorded))
    if extra:
        raise DatasetMismatch(f"{root / extra[0]}: a file preprocess did not write")
    for name, want in recorded.items():
        path = root / name
        if name not in present:
            raise DatasetMismatch(f"{path}: missing from the dataset preprocess wrote")
        if path.stat().st_size != want.get("bytes"):
            raise DatasetMismatch(
                f"{path}: {path.stat().st_size} bytes, preprocess wrote {want.get('bytes')}: "
                "changed since"
            )
    for name, want in recorded.items() if content else ():  # after every size: cheap ones first
        if file_digest(root / name) != want.get("sha256"):
            raise DatasetMismatch(
                f"{root / name}: its content is not what preprocess wrote (SHA-256 differs): "
                "changed since; preprocess the window again (force)"
            )


def check_fingerprint(data_dir: str | Path, expected: str) -> dict:
    """The folder's meta.json, when it records the ``expected`` fingerprint and every file is as
    written (:func:`verify_files`); :class:`DatasetMismatch` when not: a cached preprocess output
    whose folder was deleted, rebuilt for another key or changed since is never used."""
    meta_path = Path(data_dir) / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise DatasetMismatch(
            f"{data_dir}: no meta.json: the dataset folder is gone; run again with "
            "caching off for preprocess to rebuild it"
        ) from None
    except ValueError as exc:
        raise DatasetMismatch(f"{meta_path}: not valid JSON ({exc})") from None
    found = meta.get("fingerprint") if isinstance(meta, dict) else None
    if found != expected:
        raise DatasetMismatch(
            f"{data_dir}: meta.json fingerprint {str(found)[:KEY_DIGEST_CHARS]} is not the "
            f"expected {expected[:KEY_DIGEST_CHARS]}: the folder holds another dataset; run "
            "again with caching off for preprocess to rebuild it"
        )
    verify_files(data_dir, meta)
    return meta


def read_pointer(path: str | Path) -> str:
    """The dataset folder a Dataset artifact points to, once its meta.json is checked to be the one the
    artifact was made for (:func:`check_fingerprint`)."""
    try:
        pointer = json.loads(Path(path).read_text())
        uri, fingerprint = pointer["uri"], pointer["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetMismatch(
            f"{path}: not a dataset pointer ({type(exc).__name__}: {exc})"
        ) from None
    check_fingerprint(uri, fingerprint)
    return uri
