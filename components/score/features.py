"""Raw-id requests -> the model's input arrays, with preprocess's own code.

A request is a table in the raw contract's terms, one row per (user, item)
to score:

* ``user_id``, ``item_id`` (strings or integers, int64 included),
  ``category_id`` (optional; null = unknown), ``timestamp`` (epoch seconds or
  ISO-8601);
* optionally the user's events before it, as lists of equal length per row:
  ``events_item_id``, ``events_timestamp``, ``events_label`` (0/1) and
  ``events_category_id`` (optional). A row without them (column absent, or
  null in that row) uses its user's state in the model's snapshot; a row after
  that state that sends them continues it with the events newer than it.

Ids are hashed and parsed by the preprocess stage's functions
(:mod:`components.common.hashing`, :mod:`components.preprocess.clean`); the
arrays come from :func:`components.preprocess.rows.model_inputs`, the function
preprocess builds the dataset with. Each row is scored as if it were the
next event of its user: it sees its user's events strictly before its
timestamp (never the other rows of the request), and the item and category
counts of the snapshot (the training window's :class:`CounterState` at its
end). Given the events a dataset row had before it and the counts at its
time, the arrays are the dataset's, bit for bit (tests/integration/test_served_features.py).

A model version's snapshot of its users (:class:`UserState`, ``user_state.npz``)
holds only what scoring a user after the window needs, never the window's events:
each user's last ``seq_len`` clicks and last ``neg_len`` skips (item and category
as their hash buckets' residues, with their times), and per user, per (user,
category) and per (user, item) the impression and click counts and the last
exposure and click times, the pairs keyed by a keyed hash (the deployment's id
key) so that they link to no item. Rows scored from it must come after their
user's last event in the window (what serving does); earlier ones are refused.
Its times are kept at ``SNAPSHOT_SECONDS``, a day (rounded up to
the next multiple and never past the window's end, so no request after the window looks
older than the snapshot): exact times single out a user from two of their clicks or link a
raw log's user by the last exposure alone, and a day's resolution costs no served AUC we can
measure (``make bench-quality``: the resolutions against exact times). What it still reveals is measured in docs/security.md. The rows of one user scored
from it share that user's state, assembled once per request: a ranking call of
one user over 10,000 candidates holds the user's events once, not once per row.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from components.common.dataset import COUNT_STATE_FILE, USER_EVENT_COLUMNS, USER_EVENTS_DIR
from components.common.hashing import (
    KEY_ENV,
    IdKeyError,
    hash_ids,
    is_public_key,
    key_fingerprint,
    same_key,
)
from components.common.schema import SECONDS_PER_DAY, day_start_epoch
from components.common.storage import atomic_write_bytes
from components.preprocess.counts import (
    NEVER_TS,
    CounterState,
    count_columns,
    log_seconds,
    pair_key,
)
from components.preprocess.rows import model_inputs
from components.preprocess.sequences import duplicate_mask, sort_order

REQUIRED = ("user_id", "item_id", "timestamp")
OPTIONAL = ("category_id",)
EVENT_COLUMNS = ("events_item_id", "events_timestamp", "events_label")
EVENT_OPTIONAL = ("events_category_id",)
COLUMNS = (*REQUIRED, *OPTIONAL, *EVENT_COLUMNS, *EVENT_OPTIONAL)
MAX_EVENTS_PER_ROW = 10_000
"""Bounds a request's memory: more events than this for one row is refused."""
MAX_ROWS = 20_000
"""Rows one request may score (a ranking call of one user over 10,000 candidates fits)."""
MAX_EVENTS = 200_000
"""Events one request may send over all its rows."""
LATEST_SECONDS = 7_258_118_400
"""2200-01-01: timestamps must lie in 1970 .. 2200 (keeps the history key arithmetic in range)."""
USER_STATE = "user_state.npz"
ENTITIES = ("user", "user_category", "user_item")
"""The per-user count entities (components.common.dataset.USER_ENTITIES), in dense order."""
TOTALS = ("imps", "clicks", "exposure", "click")
USER_COLUMNS = slice(6, 6 + 5 * len(ENTITIES))
"""Where the user-level columns sit in ``dense`` (after the item and category counts)."""


class RequestError(ValueError):
    """A request the model cannot score; the message names the row and column, on one line."""


@dataclass(frozen=True)
class Layout:
    """Bucket counts and sequence lengths of a model (its vocab), as :func:`model_inputs` takes them."""

    item_buckets: int
    category_buckets: int
    user_buckets: int
    seq_len: int
    neg_len: int

    @classmethod
    def of(cls, vocab, check_key: bool = True) -> Layout:
        """The layout of a model's ``vocab``; ``check_key``: refuse (:class:`IdKeyError`) when the
        ids it was trained on were hashed under another key than this process's."""
        if check_key and not same_key(vocab.id_key):
            raise IdKeyError(
                f"this model hashes ids under the key {vocab.id_key or 'of an older version'}, "
                f"this process under {key_fingerprint()}"
                f"{f' (${KEY_ENV} unset: the public default key)' if is_public_key() else ''}: "
                f"set ${KEY_ENV} to the deployment's id secret the model was trained with"
            )
        return cls(vocab.item, vocab.category, vocab.user, vocab.seq_len, vocab.neg_len)


SNAPSHOT_SECONDS = SECONDS_PER_DAY
"""Time resolution of a version's snapshot (a divisor of a day, so a window ending at midnight
ends on a step): its event and last-exposure/click times are rounded up to a multiple of it."""


def coarse_times(ts: np.ndarray, resolution: int, until: int | None = None) -> np.ndarray:
    """``ts`` rounded up to a multiple of ``resolution`` seconds, and no later than ``until``
    (the window's end: an event logged after it, in its last day's folder, is moved back to it
    rather than forward past requests of the next day); ``NEVER_TS`` kept."""
    ts = np.asarray(ts, np.int64)
    if resolution <= 1:
        return ts
    if SECONDS_PER_DAY % resolution:
        raise ValueError(f"a snapshot's resolution divides a day; got {resolution} seconds")
    up = -(-ts // resolution) * resolution
    if until is not None:
        up = np.minimum(up, np.int64(until))
    return np.where(ts == NEVER_TS, ts, up)


@dataclass
class UserState:
    """What a model version knows of its users at the end of its training window.

    ``events``: each user's last ``seq_len`` clicks and last ``neg_len`` skips as key columns
    (``item_key``/``cat_key``: bucket residues, see :func:`_residue`) sorted by user;
    ``totals[entity]``: sorted ``key`` (the user key; for pairs :func:`pair_digest`) with the
    entity's ``imps``, ``clicks`` and last ``exposure``/``click`` times over the whole window."""

    events: dict[str, np.ndarray]
    totals: dict[str, dict[str, np.ndarray]]

    def save(self, path: str | Path) -> Path:
        import io

        arrays = {f"events_{k}": v for k, v in self.events.items()}
        for entity, table in self.totals.items():
            arrays |= {f"{entity}_{k}": v for k, v in table.items()}
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        return atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> UserState:
        with np.load(path, allow_pickle=False) as saved:
            events = {k: saved[f"events_{k}"].astype(np.int64) for k in USER_EVENT_COLUMNS}
            totals = {
                e: {k: saved[f"{e}_{k}"].astype(np.int64) for k in ("key", *TOTALS)}
                for e in ENTITIES
            }
        return cls(events, totals)

    @classmethod
    def of_events(
        cls,
        events: dict[str, np.ndarray],
        layout: Layout,
        resolution: int = SNAPSHOT_SECONDS,
        until: int | None = None,
    ) -> UserState:
        """The state of a window's kept events (key columns, any order), its times at
        ``resolution`` seconds and never past ``until``, the window's end (:func:`coarse_times`)."""
        order = sort_order(
            events["user_key"],
            events["ts"],
            events["item_key"],
            events["cat_key"],
            events["label"],
            np.zeros(len(events["ts"]), np.int8),
        )
        ev = {k: np.asarray(v, np.int64)[order] for k, v in events.items()}
        user, label = ev["user_key"], ev["label"]
        keys = {
            "user": user,
            "user_category": pair_digest(user, ev["cat_key"]),
            "user_item": pair_digest(user, ev["item_key"]),
        }
        totals = {entity: _totals(keys[entity], ev["ts"], label) for entity in ENTITIES}
        for table in totals.values():
            for name in ("exposure", "click"):
                table[name] = coarse_times(table[name], resolution, until)
        # the last seq_len clicks and neg_len skips of each user: all a history can show
        keep = np.zeros(len(user), bool)
        for wanted, length in ((1, layout.seq_len), (0, layout.neg_len)):
            rows = np.flatnonzero(label == wanted)
            later = _count_later(user[rows])
            keep[rows[later < length]] = True
        kept = {k: v[keep] for k, v in ev.items()}
        # events of one time step keep their order (a feed shows several items at once; coarse
        # times put more in one step): a multiple of the modulus per rank in that step sorts as
        # the keys did, and buckets as they do
        kept["ts"] = coarse_times(kept["ts"], resolution, until)
        u, t = kept["user_key"], kept["ts"]
        first = np.r_[True, (u[1:] != u[:-1]) | (t[1:] != t[:-1])] if len(u) else np.ones(0, bool)
        rank = np.arange(len(u)) - np.maximum.accumulate(np.where(first, np.arange(len(u)), 0))
        kept["item_key"] = _residue(kept["item_key"], layout.item_buckets) + rank * (
            layout.item_buckets - 1
        )
        kept["cat_key"] = np.where(
            kept["cat_key"] == 0, 0, _residue(kept["cat_key"], layout.category_buckets)
        )
        return cls(kept, totals)

    def user_events(self, user_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``events`` for each user: ``(row index into events, owner index into user_key)``."""
        keys = self.events["user_key"]
        start = np.searchsorted(keys, user_key, side="left")
        end = np.searchsorted(keys, user_key, side="right")
        return ranges(start, end)

    def last_event(self, user_key: np.ndarray) -> np.ndarray:
        """Each user's last event time in the window (``NEVER_TS``: not in it)."""
        return self._lookup("user", user_key)["exposure"]

    def user_columns(self, user, item, cat, ts, prior, since=None) -> np.ndarray:
        """The user-level dense columns of rows after their users' last events, from the totals
        (plus ``since``: per entity the counts and times of events after the window): what
        :func:`components.preprocess.counts.user_features` gives them from every event."""
        found = {
            "user": self._lookup("user", user),
            "user_category": self._lookup("user_category", pair_digest(user, cat)),
            "user_item": self._lookup("user_item", pair_digest(user, item)),
        }
        counts, recency = [], []
        for entity in ENTITIES:
            t = found[entity]
            if since is not None:
                extra = since[entity]
                t = {
                    "imps": t["imps"] + extra["imps"],
                    "clicks": t["clicks"] + extra["clicks"],
                    "exposure": np.maximum(t["exposure"], extra["exposure"]),
                    "click": np.maximum(t["click"], extra["click"]),
                }
            counts += count_columns(t["imps"], t["clicks"], prior)
            recency += [log_seconds(ts, t["exposure"]), log_seconds(ts, t["click"])]
        return np.stack(counts + recency, axis=1).astype(np.float32)

    def _lookup(self, entity: str, key: np.ndarray) -> dict[str, np.ndarray]:
        table = self.totals[entity]
        at = np.minimum(np.searchsorted(table["key"], key), max(len(table["key"]) - 1, 0))
        hit = table["key"][at] == key if len(table["key"]) else np.zeros(len(key), bool)
        none = {"imps": 0, "clicks": 0, "exposure": NEVER_TS, "click": NEVER_TS}
        return {k: np.where(hit, table[k][at] if len(table[k]) else 0, none[k]) for k in TOTALS}


def pair_digest(user_key: np.ndarray, other_key: np.ndarray) -> np.ndarray:
    """A (user, item) or (user, category) pair as a keyed hash (the deployment's id key) of its
    :func:`pair_key`: the pair's key minus the user's would otherwise be the item's own key."""
    if not len(user_key):
        return np.empty(0, np.int64)
    return hash_ids(pair_key(user_key, other_key))[0]


def _residue(keys: np.ndarray, buckets: int) -> np.ndarray:
    """A key reduced to what bucketing reads (``1 + residue`` is its bucket), kept non-zero: the
    bucket of ``_residue(k)`` (plus any multiple of ``buckets - 1``) is the bucket of ``k``, and
    the key itself is gone."""
    m = np.uint64(buckets - 1)
    return (keys.view(np.uint64) % m + m).astype(np.int64)


def _count_later(user: np.ndarray) -> np.ndarray:
    """For rows sorted by user: how many rows of the same user come after each."""
    n = len(user)
    if not n:
        return np.empty(0, np.int64)
    last = np.r_[user[1:] != user[:-1], True]
    end = np.flatnonzero(last)
    group_end = np.repeat(end, np.diff(np.r_[-1, end]))
    return group_end - np.arange(n)


def _totals(key: np.ndarray, ts: np.ndarray, label: np.ndarray) -> dict[str, np.ndarray]:
    order = np.lexsort((ts, key))
    key, ts, label = key[order], ts[order], label[order]
    if not len(key):
        return {k: np.empty(0, np.int64) for k in ("key", *TOTALS)}
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    clicked_ts = np.where(label == 1, ts, NEVER_TS)
    return {
        "key": key[starts],
        "imps": (ends - starts).astype(np.int64),
        "clicks": np.add.reduceat(label, starts).astype(np.int64),
        "exposure": ts[ends - 1],
        "click": np.maximum.reduceat(clicked_ts, starts),
    }


@dataclass
class Snapshot:
    """What a model version knows as of the end of its training window: ``state``, the item and
    category counts; ``users``, its :class:`UserState` (None: requests must carry their events)."""

    state: CounterState
    users: UserState | None = None

    @classmethod
    def load(cls, count_state: str | Path, user_state: str | Path | None = None) -> Snapshot:
        state = CounterState()
        with np.load(count_state) as saved:
            state.load_state_dict(dict(saved))
        return cls(state, None if user_state is None else UserState.load(user_state))


def user_event_parts(dataset: str | Path) -> list[Path]:
    """The Parquet parts of a dataset's ``USER_EVENTS_DIR``, in order (none: an older dataset)."""
    return sorted((Path(dataset) / USER_EVENTS_DIR).glob("part-*.parquet"))


def read_user_events(parts: list[Path]) -> dict[str, np.ndarray]:
    """``USER_EVENT_COLUMNS`` of every part, as int64 arrays."""
    table = pa.concat_tables([pq.read_table(p, columns=list(USER_EVENT_COLUMNS)) for p in parts])
    return {k: table.column(k).to_numpy().astype(np.int64) for k in USER_EVENT_COLUMNS}


def write_snapshot(
    dataset: str | Path, out: str | Path, resolution: int = SNAPSHOT_SECONDS
) -> dict[str, Path]:
    """The snapshot files of a dataset (its ``count_state.npz``, and the :class:`UserState` of its
    ``user_events/``, times at ``resolution`` seconds) written into ``out``; returns
    ``{name: path}``."""
    from components.common.dataset_meta import DatasetMeta
    from components.train.model import Vocab

    dataset, out = Path(dataset), Path(out)
    parts = user_event_parts(dataset)
    if not (dataset / COUNT_STATE_FILE).is_file() or not parts:
        raise FileNotFoundError(
            f"{dataset}: no {COUNT_STATE_FILE} and {USER_EVENTS_DIR}/ (written by preprocess "
            f"since the scorer's snapshot exists; preprocess the window again)"
        )
    out.mkdir(parents=True, exist_ok=True)
    state = out / COUNT_STATE_FILE
    state.write_bytes((dataset / COUNT_STATE_FILE).read_bytes())
    events = read_user_events(parts)
    meta = DatasetMeta.read(dataset, splits=())
    layout = Layout.of(Vocab.from_meta(meta), check_key=False)
    until = (
        day_start_epoch(dt.date.fromisoformat(meta.window.end)) + SECONDS_PER_DAY
        if meta.window
        else None
    )
    users = UserState.of_events(events, layout, resolution, until).save(out / USER_STATE)
    return {"count_state": state, "user_state": users}


def request_inputs(
    frame: pd.DataFrame, snapshot: Snapshot, layout: Layout
) -> dict[str, np.ndarray]:
    """The Dataset contract's arrays (all of ``array_specs``) for every request row, in request order."""
    unknown = [c for c in frame.columns if c not in COLUMNS]
    if unknown:
        raise RequestError(
            f"unknown column(s) {', '.join(map(str, unknown))}; a request has {', '.join(COLUMNS)}"
        )
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise RequestError(
            f"missing column(s) {', '.join(missing)}; required: {', '.join(REQUIRED)}"
        )
    n = len(frame)
    if n == 0:
        raise RequestError("the request has no rows")
    if n > MAX_ROWS:
        raise RequestError(f"the request has {n:,} rows; at most {MAX_ROWS:,} per request")
    user = _ids(frame["user_id"], "user_id")
    item = _ids(frame["item_id"], "item_id")
    cat = (
        _ids(frame["category_id"], "category_id", nullable=True)
        if "category_id" in frame.columns
        else np.zeros(n, np.int64)
    )
    ts = _timestamps(frame["timestamp"], "timestamp")
    events, owner = _request_events(frame, user)
    given = np.zeros(n, bool)
    given[owner] = True
    if "events_item_id" in frame.columns:
        given |= frame["events_item_id"].notna().to_numpy()
    if snapshot.users is None and not given.all():
        raise RequestError(
            f"row {int(np.flatnonzero(~given)[0])}: no events given, and this model version "
            f"carries no snapshot of its users; send events_item_id, "
            f"events_timestamp, events_label"
        )
    if snapshot.users is not None and not given.all():
        early = ~given & (ts <= snapshot.users.last_event(user))
        if early.any():
            i = int(np.flatnonzero(early)[0])
            raise RequestError(
                f"row {i}: timestamp {int(ts[i])} is not after its user's last event in this "
                "model's snapshot: the snapshot scores what comes after its window; send the "
                "row's events (events_item_id, events_timestamp, events_label)"
            )
    return key_inputs(user, item, cat, ts, snapshot, layout, events, owner, given)


def key_inputs(
    user: np.ndarray,
    item: np.ndarray,
    cat: np.ndarray,
    ts: np.ndarray,
    snapshot: Snapshot,
    layout: Layout,
    events: dict[str, np.ndarray] | None = None,
    owner: np.ndarray | None = None,
    given: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of rows given as keys (hashed ids) and epoch seconds: each row with ``events`` (key
    columns; ``owner``: the row each belongs to) where ``given``, else its user's snapshot state
    (rows after their user's last event in it).

    With a users' snapshot, a row that sends events and comes after its user's last event in the
    snapshot *continues* it: the snapshot's state plus the events sent that are newer than it (older
    ones are in the snapshot already), so a caller sending the user's events of the day gets the
    features a dataset row of that day has. A row inside the window is built from its events alone."""
    n = len(user)
    if events is None:
        events, owner = (
            {k: np.empty(0, np.int64) for k in USER_EVENT_COLUMNS},
            np.empty(0, np.int64),
        )
    given = np.zeros(n, bool) if given is None else given
    users = snapshot.users
    continued = np.zeros(n, bool)
    if users is not None and given.any():
        last = users.last_event(user)
        continued = given & (ts > last)
        newer = ~continued[owner] | (events["ts"] > last[owner])
        events, owner = _distinct({k: v[newer] for k, v in events.items()}, owner[newer])
    since = _since(events, owner, item, cat, ts, continued)
    # a row sending events is a group of its own; the rows of one user scored from the snapshot
    # share one group holding that user's state once (a ranking call's 10,000 candidates too)
    group = np.arange(n, dtype=np.int64)
    from_snapshot = ~given | continued
    if users is not None and from_snapshot.any():
        distinct, which = np.unique(user[~given], return_inverse=True)
        group[~given] = n + which
        rows, owners = users.user_events(distinct)
        alone = np.flatnonzero(continued)  # each continued row's group holds its user's state
        rows_c, owners_c = users.user_events(user[alone])
        picked = np.concatenate([rows, rows_c])
        events = {
            k: np.concatenate([events[k], users.events[k][picked]]) for k in USER_EVENT_COLUMNS
        }
        owner = np.concatenate([owner, n + owners, alone[owners_c]])
    arrays, prior = _assemble(user, item, cat, ts, group, events, owner, snapshot.state, layout)
    if users is not None and from_snapshot.any():  # the counts over the whole window (+ since)
        rows = np.flatnonzero(from_snapshot)
        arrays["dense"][rows, USER_COLUMNS] = users.user_columns(
            user[rows],
            item[rows],
            cat[rows],
            ts[rows],
            prior[rows],
            {e: {k: v[rows] for k, v in t.items()} for e, t in since.items()},
        )
    return arrays


def _distinct(events: dict[str, np.ndarray], owner: np.ndarray):
    """Events without exact duplicates within one owner's (preprocess drops them too)."""
    order = sort_order(
        owner,
        events["ts"],
        events["item_key"],
        events["cat_key"],
        events["label"],
        np.zeros(len(owner), np.int8),
    )
    events, owner = {k: v[order] for k, v in events.items()}, owner[order]
    dup = duplicate_mask(
        owner, events["ts"], events["item_key"], events["cat_key"], events["label"]
    )
    return {k: v[~dup] for k, v in events.items()}, owner[~dup]


def _since(events, owner, item, cat, ts, rows: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """Per entity and row: the impressions, clicks and last exposure and click times of the events
    the row sent strictly before its own time (zero and never for rows not in ``rows``)."""
    n = len(ts)
    mine = rows[owner] & (events["ts"] < ts[owner])
    click = events["label"] == 1
    out = {}
    for entity, same in (
        ("user", mine),
        ("user_category", mine & (events["cat_key"] == cat[owner])),
        ("user_item", mine & (events["item_key"] == item[owner])),
    ):
        o = owner[same]
        exposure, clicked = np.full(n, NEVER_TS), np.full(n, NEVER_TS)
        np.maximum.at(exposure, o, events["ts"][same])
        np.maximum.at(clicked, owner[same & click], events["ts"][same & click])
        out[entity] = {
            "imps": np.bincount(o, minlength=n).astype(np.int64),
            "clicks": np.bincount(owner[same & click], minlength=n).astype(np.int64),
            "exposure": exposure,
            "click": clicked,
        }
    return out


NOT_HISTORY = 2
"""The label of a request row inside its group: neither a click nor a skip, so no row of the group
(another candidate of the same user) ever has it in its history."""


def _assemble(user, item, cat, ts, row_group, events, owner, state: CounterState, layout: Layout):
    """The rows' arrays (in row order) and each row's prior; ``row_group``: each row's group,
    ``owner``: each event's."""
    n = len(user)
    # exact duplicates among one group's events count once, as preprocess drops them
    events, owner = _distinct(events, owner)
    group = np.concatenate([owner, row_group]).astype(np.int64)
    row = np.concatenate([np.full(len(owner), -1), np.arange(n)])
    cols = {
        "user_key": np.concatenate([events["user_key"], user]),
        "item_key": np.concatenate([events["item_key"], item]),
        "cat_key": np.concatenate([events["cat_key"], cat]),
        "ts": np.concatenate([events["ts"], ts]),
        "label": np.concatenate([events["label"], np.full(n, NOT_HISTORY)]).astype(np.int8),
    }
    order = sort_order(
        group, cols["ts"], cols["item_key"], cols["cat_key"], cols["label"], row >= 0
    )
    cols = {k: v[order] for k, v in cols.items()}
    group, row = group[order], row[order]
    target = row >= 0
    # each row alone against the snapshot's counts: equal timestamps never see each other
    counts, prior = state.features(
        cols["item_key"][target],
        cols["cat_key"][target],
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        fold=False,
    )
    global_columns = np.zeros((len(group), counts.shape[1]), np.float32)
    global_columns[target] = counts
    row_prior = np.full(len(group), 0.5)
    row_prior[target] = prior
    arrays = model_inputs(cols, global_columns, row_prior, layout, group=group)
    back = np.empty(n, np.int64)
    back[row[target]] = np.arange(n)
    out = {k: v[target][back] for k, v in arrays.items()}
    out["label"][:] = 0  # a request's outcome is not known
    return out, row_prior[target][back]


def _request_events(
    frame: pd.DataFrame, user: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The events sent with the request, flattened: key columns and the request row of each."""
    present = [c for c in (*EVENT_COLUMNS, *EVENT_OPTIONAL) if c in frame.columns]
    if not present:
        return {k: np.empty(0, np.int64) for k in USER_EVENT_COLUMNS}, np.empty(0, np.int64)
    lacking = [c for c in EVENT_COLUMNS if c not in frame.columns]
    if lacking:
        raise RequestError(f"events need {', '.join(EVENT_COLUMNS)}; missing {', '.join(lacking)}")
    lists = {c: frame[c].tolist() for c in present}
    lengths = np.zeros(len(frame), np.int64)
    for i, value in enumerate(lists["events_item_id"]):
        if _is_null(value):
            if any(not _is_null(lists[c][i]) for c in present):
                raise RequestError(
                    f"row {i}: events_item_id is null but other events_* columns are not"
                )
            continue
        for c in present:
            other = lists[c][i]
            if c == "events_category_id" and _is_null(other):
                continue
            if not isinstance(other, list | tuple | np.ndarray):
                raise RequestError(f"row {i}: {c} must be a list, got {type(other).__name__}")
            if len(other) != len(value):
                raise RequestError(
                    f"row {i}: {c} has {len(other)} values, events_item_id {len(value)}"
                )
        if len(value) > MAX_EVENTS_PER_ROW:
            raise RequestError(
                f"row {i}: {len(value)} events; at most {MAX_EVENTS_PER_ROW} per row"
            )
        lengths[i] = len(value)
    if lengths.sum() > MAX_EVENTS:
        raise RequestError(
            f"the request sends {int(lengths.sum()):,} events; at most {MAX_EVENTS:,} per request"
        )
    owner = np.repeat(np.arange(len(frame)), lengths)

    def flat(column: str, fill=None) -> list:
        out = []
        for i, n in enumerate(lengths):
            value = lists[column][i] if column in lists else None
            out.extend(list(value) if n and not _is_null(value) else [fill] * int(n))
        return out

    where = [
        (int(r), j) for r, n in zip(range(len(frame)), lengths, strict=True) for j in range(int(n))
    ]
    events = {
        "user_key": user[owner],
        "item_key": _ids(flat("events_item_id"), "events_item_id", where=where),
        "cat_key": _ids(
            flat("events_category_id"), "events_category_id", nullable=True, where=where
        ),
        "ts": _timestamps(flat("events_timestamp"), "events_timestamp", where=where),
        "label": _labels(flat("events_label"), where),
    }
    return events, owner


def _ids(values, column: str, nullable: bool = False, where=None) -> np.ndarray:
    values = list(values.tolist() if hasattr(values, "tolist") else values)
    if not values:
        return np.empty(0, np.int64)
    _check_scalars(values, column, ID_TYPES, where)
    keys, unusable = hash_ids(values)
    null = np.array([_is_null(v) for v in values])
    bad = unusable & ~null if nullable else unusable
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RequestError(
            f"{_row_label(i, where)}: {column} {_short_repr(values[i])} is no usable id "
            f"({'an empty value' if null[i] else 'a non-integral number or empty text'})"
        )
    return np.where(null, 0, keys).astype(np.int64) if nullable else keys


def _timestamps(values, column: str, where=None) -> np.ndarray:
    from components.preprocess.clean import parse_timestamps

    _check_scalars(
        values.tolist() if hasattr(values, "tolist") else values, column, TIME_TYPES, where
    )
    seconds, valid = parse_timestamps(_arrow(values))
    valid &= (seconds >= 0) & (seconds < LATEST_SECONDS)
    if not valid.all():
        i = int(np.flatnonzero(~valid)[0])
        shown = values.iloc[i] if hasattr(values, "iloc") else values[i]
        raise RequestError(
            f"{_row_label(i, where)}: {column} {_short_repr(shown)} is no time between 1970 and 2200 "
            f"(epoch seconds or ISO-8601 with a time of day)"
        )
    return seconds


def _labels(values: list, where) -> np.ndarray:
    from components.preprocess.clean import parse_labels

    if not values:
        return np.empty(0, np.int64)
    _check_scalars(values, "events_label", (*ID_TYPES, bool, np.bool_), where)
    labels, valid = parse_labels(_arrow(values))
    if not valid.all():
        i = int(np.flatnonzero(~valid)[0])
        raise RequestError(
            f"{_row_label(i, where)}: events_label {_short_repr(values[i])} is not 0 or 1"
        )
    return labels.astype(np.int64)


ID_TYPES = (str, int, float, np.integer, np.floating)
"""What an id (or an epoch second, or a label) may be: text or a number; never a list or an
object, whose text would be hashed as an id. Booleans are no ids."""
TIME_TYPES = (*ID_TYPES, dt.date, np.datetime64)


def _check_scalars(values: list, column: str, types: tuple, where) -> None:
    for i, value in enumerate(values):
        if value is not None and (
            not isinstance(value, types)
            or (isinstance(value, bool | np.bool_) and bool not in types)
        ):
            raise RequestError(
                f"{_row_label(i, where)}: {column} is {_kind(value)}, not "
                f"{'a time' if dt.date in types else 'an id (text or an integer)'}"
            )


def _kind(value) -> str:
    return f"a {type(value).__name__} ({_short_repr(value)})"


def _arrow(values) -> pa.Array:
    """An Arrow array of request values; a column mixing numbers and text becomes text."""
    values = list(values.tolist() if hasattr(values, "tolist") else values)
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([None if _is_null(v) else str(v) for v in values], pa.string())


def _is_null(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _row_label(i: int, where) -> str:
    if where is None:
        return f"row {i}"
    row, j = where[i]
    return f"row {row} event {j}"


def _short_repr(value) -> str:
    text = "null" if _is_null(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def ranges(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The concatenated ``range(start[i], end[i])`` and, for each element, its ``i``."""
    lengths = end - start
    owner = np.repeat(np.arange(len(start)), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return (np.repeat(start, lengths) + offsets).astype(np.int64), owner
