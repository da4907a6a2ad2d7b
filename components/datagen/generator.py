"""Synthetic e-commerce exposure/click logs whose true click probability is known.

The simulated world (all vectorized with numpy, one seeded ``numpy.random.Generator``):

* items have Zipf-like popularity (exponent ~1) and sit in categories whose
  sizes are skewed too; each item has a fixed *appeal* (its true, history-blind
  click propensity) that is partly popularity and partly independent quality;
* users have heavy-tailed activity, a personal click bias and a few favourite
  categories (the hidden interest) that drift slowly from day to day;
* users browse in sessions (bursts of exposures seconds to minutes apart),
  more of them in the evening; each session has a theme category;
* an exposure is a theme item, a globally popular item, or a repeat of an
  item the user clicked recently;
* the click probability combines item appeal, user bias, hidden interest and
  -- the planted sequence signal -- how the item relates to the user's recent
  clicks: category match weighted by ``exp(-age / tau)`` and a repeat-item
  bonus; click propensity also varies by hour of day.

Each day is simulated in time-ordered slices: probabilities for a slice come
from the per-user click history at the slice start, labels are drawn, and the
history is updated from the slice's clicks.  The per-slice logit intercept is
calibrated (Newton steps) so the click rate follows ``click_rate``.

Output (see ``generate``): raw-contract day folders, a ``_truth`` sidecar with
each row's true probability ``p``, and ``_datagen.json`` with per-day AUCs of
the true ``p`` (the ceiling any model can reach) and of item appeal alone (the
best a history-blind popularity model can do).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from components.common import schema
from components.common.metrics import roc_auc
from components.common.progress import PhaseTimer, get_logger
from components.common.storage import atomic_dir, atomic_write_json, remove_stale_temps
from components.datagen.config import DatagenConfig

log = get_logger(__name__)

TRUTH_DIR = "_truth"
TRUTH_COLUMN = "p"
ROW_GROUP_ROWS = 262_144
ID_PREFIXES = {schema.USER_ID: "u", schema.ITEM_ID: "i", schema.CATEGORY_ID: "c"}
PARQUET_COMPRESSION = "zstd"

# --- the simulated world -------------------------------------------------------
# Tuned so that at the CLI defaults the oracle AUC is ~0.78-0.80 and item appeal
# alone (~0.64) is well below it; _datagen.json records these under "model".
ITEM_ZIPF_EXPONENT = 1.0
CATEGORY_SIZE_EXPONENT = 0.9  # category size weight ~ 1 / rank**0.9
FAVOURITE_CATEGORY_EXPONENT = 0.6  # flattens category popularity for favourites
FAVOURITES_PER_USER = 3
FAVOURITE_DRIFT_PER_DAY = 0.03  # share of users that swap one favourite each day
USER_ACTIVITY_SIGMA = 1.2  # lognormal: heavy-tailed events per user
# Item appeal = 0.1 * log(popularity) + 0.45 * N(0, 1), centred.  Per log-unit,
# not standardized: Zipf exposures spread log-popularity widely (sd ~ ln(items)/3.5).
APPEAL_PER_LOG_POPULARITY = 0.1
APPEAL_QUALITY_SD = 0.45
USER_BIAS_SD = 0.35
USER_ACTIVITY_EFFECT = 0.1  # active users click slightly more per exposure
INTEREST_EFFECT = 0.5  # logit bonus per unit of favourite weight on the item's category

# Sessions and time of day.
SESSION_MEAN_EVENTS = 6.0
SESSION_GAP_MEDIAN_S = 25.0  # lognormal gaps: seconds to a few minutes apart
SESSION_GAP_SIGMA = 1.0
SESSION_GAP_MAX_S = 900
HOUR_CLICK_AMPLITUDE = 0.25  # logit swing of click propensity over the day, peak 21:00
THEME_FROM_FAVOURITE = 0.75  # a session's theme is a favourite category this often

# Exposure sources (probabilities per exposure).
SOURCE_THEME, SOURCE_POPULAR, SOURCE_RECENT = 0, 1, 2
SOURCE_PROBABILITIES = (0.55, 0.35, 0.10)

# The planted sequence signal.
HISTORY_LENGTH = 8  # clicked items remembered per user
CATEGORY_RECENCY_TAU_S = 6 * 3600.0
REPEAT_RECENCY_TAU_S = 24 * 3600.0
RECENT_CATEGORY_EFFECT = 0.9  # * log1p(sum of decayed category matches)
REPEAT_ITEM_EFFECT = 1.2  # * decay of the most recent click on the same item

SLICE_SECONDS = 600  # history is refreshed every 10 simulated minutes
NO_CLICK = -1
NO_CLICK_TIME = np.iinfo(np.int64).min // 4  # far enough back that every decay is 0


# --- metrics ---------------------------------------------------------------------


# --- the world -------------------------------------------------------------------


def _standardize(values: np.ndarray) -> np.ndarray:
    spread = values.std()
    return (values - values.mean()) / (spread if spread > 0 else 1.0)


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    # Clipped so exp never overflows; p stays within (2e-18, 1 - 2e-18).
    return 1.0 / (1.0 + np.exp(-np.clip(logits, -40.0, 40.0)))


class _World:
    """The static parts of the simulation: items, categories, users, interests."""

    def __init__(self, config: DatagenConfig, rng: np.random.Generator) -> None:
        n_items, n_cats, n_users = config.items, config.categories, config.users
        # Zipf popularity over a random ranking, so popularity is unrelated to id.
        self.item_popularity = 1.0 / (rng.permutation(n_items) + 1.0) ** ITEM_ZIPF_EXPONENT

        # Every category gets one item; the rest follow skewed category weights.
        size_weight = 1.0 / (rng.permutation(n_cats) + 1.0) ** CATEGORY_SIZE_EXPONENT
        shuffled_items = rng.permutation(n_items)
        self.item_category = np.empty(n_items, dtype=np.int32)
        self.item_category[shuffled_items[:n_cats]] = np.arange(n_cats, dtype=np.int32)
        size_cdf = np.cumsum(size_weight) / size_weight.sum()
        drawn = np.searchsorted(size_cdf, rng.random(n_items - n_cats), side="right")
        self.item_category[shuffled_items[n_cats:]] = np.minimum(drawn, n_cats - 1)

        # One cumulative popularity array over items ordered by category serves
        # both global draws and within-category draws (a sub-range of it).
        self.items_by_category = np.argsort(self.item_category, kind="stable").astype(np.int32)
        self.popularity_cum = np.cumsum(self.item_popularity[self.items_by_category])
        sorted_cats = self.item_category[self.items_by_category]
        self.category_first = np.searchsorted(sorted_cats, np.arange(n_cats), side="left")
        self.category_end = np.searchsorted(sorted_cats, np.arange(n_cats), side="right")
        self.category_cum_low = np.where(
            self.category_first > 0, self.popularity_cum[self.category_first - 1], 0.0
        )
        self.category_cum_high = self.popularity_cum[self.category_end - 1]
        category_popularity = self.category_cum_high - self.category_cum_low
        self.category_cdf = np.cumsum(category_popularity) / category_popularity.sum()
        favourite_weight = category_popularity**FAVOURITE_CATEGORY_EXPONENT
        self.favourite_cdf = np.cumsum(favourite_weight) / favourite_weight.sum()

        log_popularity = np.log(self.item_popularity)
        # Quality and the users' noise show only in the clicks (hidden.py reports on them).
        self.item_quality = APPEAL_QUALITY_SD * rng.standard_normal(n_items)
        self.item_appeal = (
            APPEAL_PER_LOG_POPULARITY * (log_popularity - log_popularity.mean()) + self.item_quality
        )

        activity = rng.lognormal(0.0, USER_ACTIVITY_SIGMA, n_users)
        self.user_cdf = np.cumsum(activity) / activity.sum()
        self.user_noise = USER_BIAS_SD * rng.standard_normal(n_users)
        self.user_bias = self.user_noise + USER_ACTIVITY_EFFECT * _standardize(np.log(activity))

        n_favourites = min(FAVOURITES_PER_USER, n_cats)
        self.favourite_categories = self.draw_favourite_categories(rng, (n_users, n_favourites))
        # Weights average 1 per favourite; a user's strongest interest dominates.
        self.favourite_weights = n_favourites * rng.dirichlet(np.full(n_favourites, 1.5), n_users)
        self.favourite_cdf_per_user = np.cumsum(self.favourite_weights, axis=1) / n_favourites

    def draw_favourite_categories(self, rng: np.random.Generator, shape) -> np.ndarray:
        drawn = np.searchsorted(self.favourite_cdf, rng.random(shape), side="right")
        return np.minimum(drawn, len(self.favourite_cdf) - 1).astype(np.int32)

    def drift_interests(self, rng: np.random.Generator) -> int:
        """A few users swap one favourite category for a new one; returns how many."""
        n_users, n_favourites = self.favourite_categories.shape
        movers = np.flatnonzero(rng.random(n_users) < FAVOURITE_DRIFT_PER_DAY)
        slots = rng.integers(0, n_favourites, len(movers))
        self.favourite_categories[movers, slots] = self.draw_favourite_categories(rng, len(movers))
        return len(movers)

    def draw_users(self, uniform: np.ndarray) -> np.ndarray:
        drawn = np.searchsorted(self.user_cdf, uniform, side="right")
        return np.minimum(drawn, len(self.user_cdf) - 1).astype(np.int32)

    def draw_categories(self, uniform: np.ndarray) -> np.ndarray:
        drawn = np.searchsorted(self.category_cdf, uniform, side="right")
        return np.minimum(drawn, len(self.category_cdf) - 1).astype(np.int32)

    def draw_popular_items(self, uniform: np.ndarray) -> np.ndarray:
        position = np.searchsorted(
            self.popularity_cum, uniform * self.popularity_cum[-1], side="right"
        )
        return self.items_by_category[np.minimum(position, len(self.popularity_cum) - 1)]

    def draw_items_in(self, categories: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        low, high = self.category_cum_low[categories], self.category_cum_high[categories]
        position = np.searchsorted(self.popularity_cum, low + uniform * (high - low), side="right")
        # Rounding at a category's edge must not leak into the neighbour.
        position = np.clip(
            position, self.category_first[categories], self.category_end[categories] - 1
        )
        return self.items_by_category[position]

    def interest(self, users: np.ndarray, categories: np.ndarray) -> np.ndarray:
        matches = self.favourite_categories[users] == categories[:, None]
        return (self.favourite_weights[users] * matches).sum(axis=1)


class _ClickHistory:
    """Each user's last ``HISTORY_LENGTH`` clicks, most recent first (column 0)."""

    def __init__(self, n_users: int) -> None:
        shape = (n_users, HISTORY_LENGTH)
        self.items = np.full(shape, NO_CLICK, dtype=np.int32)
        self.categories = np.full(shape, NO_CLICK, dtype=np.int32)
        self.times = np.full(shape, NO_CLICK_TIME, dtype=np.int64)
        self.count = np.zeros(n_users, dtype=np.int8)

    def signal(self, users, items, categories, timestamps) -> tuple[np.ndarray, np.ndarray]:
        """Recency-weighted category matches and the repeat-item decay per exposure."""
        # Matches are sparse, so decays are computed only where a category matches
        # (a repeated item always matches its own category too).
        row, column = np.nonzero(self.categories[users] == categories[:, None])
        history_user = users[row]
        age = (timestamps[row] - self.times[history_user, column]).astype(np.float64)
        category_affinity = np.bincount(
            row, weights=np.exp(age * (-1.0 / CATEGORY_RECENCY_TAU_S)), minlength=len(users)
        )
        same_item = self.items[history_user, column] == items[row]
        # Rows come out in column order, so a row's first repeat is its most recent click.
        repeat_rows, first = np.unique(row[same_item], return_index=True)
        repeat = np.zeros(len(users))
        repeat[repeat_rows] = np.exp(age[same_item][first] * (-1.0 / REPEAT_RECENCY_TAU_S))
        return category_affinity, repeat

    def recent_items(self, users: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """One of each user's remembered clicks (users must have at least one)."""
        slots = (uniform * self.count[users]).astype(np.int64)
        return self.items[users, slots]

    def record(self, users, items, categories, timestamps) -> None:
        """Push time-ordered clicks into the histories, no loop over users."""
        if len(users) == 0:
            return
        by_user = np.argsort(users, kind="stable")  # keeps time order within a user
        users, items = users[by_user], items[by_user]
        categories, timestamps = categories[by_user], timestamps[by_user]
        clicked_users, first, n_new = np.unique(users, return_index=True, return_counts=True)
        last = first + n_new - 1
        n_new = np.minimum(n_new, HISTORY_LENGTH)[:, None]
        column = np.arange(HISTORY_LENGTH)[None, :]
        # Column j takes the j-th latest new click, or old column j - n_new.
        from_new = column < n_new
        new_index = np.maximum(last[:, None] - column, 0)
        old_index = np.clip(column - n_new, 0, HISTORY_LENGTH - 1)
        rows = clicked_users[:, None]
        self.items[clicked_users] = np.where(
            from_new, items[new_index], self.items[rows, old_index]
        )
        self.categories[clicked_users] = np.where(
            from_new, categories[new_index], self.categories[rows, old_index]
        )
        self.times[clicked_users] = np.where(
            from_new, timestamps[new_index], self.times[rows, old_index]
        )
        self.count[clicked_users] = np.minimum(
            self.count[clicked_users] + n_new[:, 0], HISTORY_LENGTH
        )


# --- one day ---------------------------------------------------------------------


def _hour_target_logit(hour_traffic: np.ndarray, click_rate: float) -> np.ndarray:
    """Per-hour logit of the target click rate, centred so the daily mean stays on target."""
    hours = np.arange(24)
    swing = HOUR_CLICK_AMPLITUDE * np.cos(2 * np.pi * (hours - 21) / 24)
    base = math.log(click_rate / (1 - click_rate))
    traffic = hour_traffic / hour_traffic.sum()
    offset = 0.0
    for _ in range(50):  # Newton on the traffic-weighted mean rate
        rate = _sigmoid(base + swing + offset)
        gap = float((traffic * rate).sum()) - click_rate
        if abs(gap) < 1e-12:
            break
        offset -= gap / float((traffic * rate * (1 - rate)).sum())
    return base + swing + offset


def _hour_traffic() -> np.ndarray:
    """Relative session starts per UTC hour: a night low, a lunch bump, an evening peak."""
    hours = np.arange(24) + 0.5
    return (
        0.15
        + np.exp(-(((hours - 20.5) / 3.0) ** 2))
        + 0.45 * np.exp(-(((hours - 12.5) / 2.0) ** 2))
    )


def _layout_day(rng: np.random.Generator, world: _World, n_events: int, hour_cdf: np.ndarray):
    """Who browses when: (users, second of day, session theme), sorted by time."""
    lengths = np.empty(0, dtype=np.int64)
    while lengths.sum() < n_events:
        needed = n_events - int(lengths.sum())
        more = rng.geometric(1.0 / SESSION_MEAN_EVENTS, int(needed / SESSION_MEAN_EVENTS * 1.1) + 8)
        lengths = np.concatenate([lengths, more])
    n_sessions = int(np.searchsorted(np.cumsum(lengths), n_events, side="left")) + 1
    lengths = lengths[:n_sessions]
    lengths[-1] -= int(lengths.sum()) - n_events

    session_users = world.draw_users(rng.random(n_sessions))
    # A session's theme: usually one of the user's favourites (by weight), else any category.
    favourite_slot = (
        rng.random(n_sessions)[:, None] > world.favourite_cdf_per_user[session_users]
    ).sum(axis=1)
    favourite_slot = np.minimum(favourite_slot, world.favourite_categories.shape[1] - 1)
    themes = np.where(
        rng.random(n_sessions) < THEME_FROM_FAVOURITE,
        world.favourite_categories[session_users, favourite_slot],
        world.draw_categories(rng.random(n_sessions)),
    )
    hour = np.minimum(np.searchsorted(hour_cdf, rng.random(n_sessions), side="right"), 23)
    session_start = hour * 3600 + rng.integers(0, 3600, n_sessions)

    session_of_event = np.repeat(np.arange(n_sessions), lengths)
    first_event = np.cumsum(lengths) - lengths
    gaps = np.minimum(
        1
        + rng.lognormal(math.log(SESSION_GAP_MEDIAN_S), SESSION_GAP_SIGMA, n_events).astype(
            np.int64
        ),
        SESSION_GAP_MAX_S,
    )
    gaps[first_event] = 0
    elapsed = np.cumsum(gaps)
    offset_in_session = elapsed - elapsed[first_event][session_of_event]
    duration = offset_in_session[first_event + lengths - 1]
    # Sessions that would run past midnight start earlier, so every event stays in its day.
    session_start = np.clip(
        np.minimum(session_start, schema.SECONDS_PER_DAY - 1 - duration), 0, None
    )
    seconds = np.minimum(
        session_start[session_of_event] + offset_in_session, schema.SECONDS_PER_DAY - 1
    )

    order = np.argsort(seconds, kind="stable")
    return session_users[session_of_event][order], seconds[order], themes[session_of_event][order]


def _calibrate_intercept(logits: np.ndarray, target: float, start: float) -> float:
    """The intercept b with mean(sigmoid(b + logits)) ~= target (safeguarded Newton)."""
    intercept = start
    for _ in range(30):
        p = _sigmoid(intercept + logits)
        gap = float(p.mean()) - target
        if abs(gap) < 1e-4 * target:
            break
        slope = max(float((p * (1 - p)).mean()), 1e-12)
        intercept -= float(np.clip(gap / slope, -4.0, 4.0))
    return intercept


@dataclass
class _DayResult:
    rows: int
    clicks: int
    parts: int
    oracle_auc: float
    popularity_auc: float


class _DayWriter:
    """Buffers a day's time-ordered rows and writes raw + truth parts of ``rows_per_file``."""

    def __init__(
        self, out: Path, day: dt.date, config: DatagenConfig, id_names: dict | None
    ) -> None:
        folder = schema.day_folder_name(day)
        self.raw_dir = out / folder
        self.truth_dir = out / TRUTH_DIR / folder
        self.rows_per_file = config.rows_per_file
        self.row_group_rows = min(ROW_GROUP_ROWS, config.rows_per_file)
        self.id_names = id_names
        self.buffer: list[dict[str, np.ndarray]] = []
        self.buffered = 0
        self.parts = 0

    def add(self, columns: dict[str, np.ndarray]) -> None:
        self.buffer.append(columns)
        self.buffered += len(columns[TRUTH_COLUMN])
        if self.buffered < self.rows_per_file:
            return
        merged = {name: np.concatenate([chunk[name] for chunk in self.buffer]) for name in columns}
        start = 0
        while self.buffered - start >= self.rows_per_file:
            self._write(
                {
                    name: values[start : start + self.rows_per_file]
                    for name, values in merged.items()
                }
            )
            start += self.rows_per_file
        self.buffer = [{name: values[start:] for name, values in merged.items()}]
        self.buffered -= start

    def close(self) -> int:
        if self.buffered:
            merged = {
                name: np.concatenate([chunk[name] for chunk in self.buffer])
                for name in self.buffer[0]
            }
            self._write(merged)
        self.buffer, self.buffered = [], 0
        return self.parts

    def _write(self, rows: dict[str, np.ndarray]) -> None:
        raw = pa.table(
            {
                schema.USER_ID: self._ids(schema.USER_ID, rows["user"]),
                schema.ITEM_ID: self._ids(schema.ITEM_ID, rows["item"]),
                schema.CATEGORY_ID: self._ids(schema.CATEGORY_ID, rows["category"]),
                schema.TIMESTAMP: pa.array(rows["timestamp"], type=pa.int64()),
                schema.LABEL: pa.array(rows["label"], type=pa.int8()),
            }
        )
        truth = pa.table({TRUTH_COLUMN: pa.array(rows[TRUTH_COLUMN], type=pa.float32())})
        name = f"part-{self.parts:05d}.parquet"
        # Dictionaries help the repetitive ids but only cost time on near-unique p values.
        for folder, table, dictionary in (
            (self.raw_dir, raw, True),
            (self.truth_dir, truth, False),
        ):
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(
                table,
                folder / name,
                row_group_size=self.row_group_rows,
                compression=PARQUET_COMPRESSION,
                use_dictionary=dictionary,
            )
        self.parts += 1

    def _ids(self, column: str, indices: np.ndarray) -> pa.Array:
        if self.id_names is None:
            return pa.array(indices.astype(np.int64) + 1)  # ids start at 1
        return self.id_names[column].take(pa.array(indices))


class _Simulator:
    """Everything that evolves over the run: the world, click histories, the rng."""

    def __init__(self, config: DatagenConfig) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.world = _World(config, self.rng)
        self.history = _ClickHistory(config.users)
        hour_traffic = _hour_traffic()
        self.hour_cdf = np.cumsum(hour_traffic) / hour_traffic.sum()
        self.hour_target_rate = _sigmoid(_hour_target_logit(hour_traffic, config.click_rate))
        self.intercept = 0.0  # carried across slices as the calibration's warm start

    def day(self, day: dt.date, writer: _DayWriter) -> _DayResult:
        rng, world, history = self.rng, self.world, self.history
        users, seconds, themes = _layout_day(rng, world, self.config.events_per_day, self.hour_cdf)
        day_start = schema.day_start_epoch(day)
        slice_bounds = np.searchsorted(
            seconds, np.arange(0, schema.SECONDS_PER_DAY + 1, SLICE_SECONDS)
        )
        source_cdf = np.cumsum(SOURCE_PROBABILITIES)
        day_p, day_labels, day_items = [], [], []

        for slice_index in range(len(slice_bounds) - 1):
            lo, hi = slice_bounds[slice_index], slice_bounds[slice_index + 1]
            if lo == hi:
                continue
            slice_users, slice_themes = users[lo:hi], themes[lo:hi]
            timestamps = day_start + seconds[lo:hi]
            n = hi - lo

            # Which item each exposure shows; a repeat needs a remembered click.
            source = np.searchsorted(source_cdf, rng.random(n), side="right")
            uniform = rng.random(n)
            is_recent = (source == SOURCE_RECENT) & (history.count[slice_users] > 0)
            is_theme = source == SOURCE_THEME
            is_popular = ~(is_recent | is_theme)
            items = np.empty(n, dtype=np.int32)
            items[is_recent] = history.recent_items(slice_users[is_recent], uniform[is_recent])
            items[is_theme] = world.draw_items_in(slice_themes[is_theme], uniform[is_theme])
            items[is_popular] = world.draw_popular_items(uniform[is_popular])
            categories = world.item_category[items]

            category_affinity, repeat = history.signal(slice_users, items, categories, timestamps)
            logits = (
                world.item_appeal[items]
                + world.user_bias[slice_users]
                + INTEREST_EFFECT * world.interest(slice_users, categories)
                + RECENT_CATEGORY_EFFECT * np.log1p(category_affinity)
                + REPEAT_ITEM_EFFECT * repeat
            )
            hour = (slice_index * SLICE_SECONDS) // 3600
            self.intercept = _calibrate_intercept(
                logits, self.hour_target_rate[hour], self.intercept
            )
            p = _sigmoid(self.intercept + logits)
            labels = rng.random(n) < p

            clicked = np.flatnonzero(labels)
            history.record(
                slice_users[clicked], items[clicked], categories[clicked], timestamps[clicked]
            )

            p32 = p.astype(np.float32)
            label8 = labels.astype(np.int8)
            writer.add(
                {
                    "user": slice_users,
                    "item": items,
                    "category": categories,
                    "timestamp": timestamps,
                    "label": label8,
                    TRUTH_COLUMN: p32,
                }
            )
            day_p.append(p32)
            day_labels.append(label8)
            day_items.append(items)

        parts = writer.close()
        p_all, labels_all = np.concatenate(day_p), np.concatenate(day_labels)
        return _DayResult(
            rows=len(p_all),
            clicks=int(labels_all.sum()),
            parts=parts,
            # On the stored float32 p, so the files reproduce it exactly.
            oracle_auc=roc_auc(p_all, labels_all),
            popularity_auc=roc_auc(world.item_appeal[np.concatenate(day_items)], labels_all),
        )


# --- entry point -----------------------------------------------------------------


@contextlib.contextmanager
def one_writer(out: str | Path, waiting: Callable[[], object] = lambda: None) -> Iterator[None]:
    """Hold the lock of the dataset ``out`` for the block (an ``flock`` on a file beside it: the
    folder itself is replaced when written); ``waiting()`` is called once if another writer
    holds it, then this one waits its turn."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def extended(out: str | Path, days: int = 1) -> DatagenConfig:
    """The config of the dataset in ``out`` plus ``days`` more days ("tomorrow's logs").

    Same parameters and seed, so regenerating rewrites the existing days
    byte-identically and the new days continue the same simulated world.
    """
    config = written(out)
    if not isinstance(days, int) or days < 1:
        raise ValueError(f"days to append must be an integer >= 1, got {days!r}")
    return dataclasses.replace(config, days=config.days + days)


def written(out: str | Path) -> DatagenConfig:
    """The config the dataset in ``out`` was generated with (its ``_datagen.json``)."""
    path = schema.datagen_summary(out)
    try:
        params = json.loads(path.read_text())["parameters"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: cannot read the dataset's parameters ({exc})") from None
    return DatagenConfig(out=out, **params)


def _check_replaceable(out: Path) -> None:
    """Refuse to replace a folder that does not look like our own output."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {out} exists and is not a folder")
    summary = schema.datagen_summary(out)
    if out.is_dir() and any(out.iterdir()) and not summary.is_file():
        raise ValueError(
            f"out {out} is a non-empty folder without {summary.name}; refusing to replace it"
        )
    if out.is_dir() and summary.is_file():
        foreign = _not_written(out)
        if foreign:  # replacing the folder would delete them without a word
            raise ValueError(
                f"{foreign[0]}: not written by datagen (its {summary.name} does not record it"
                f"{f', nor {len(foreign) - 1} more' if len(foreign) > 1 else ''}); replacing "
                f"{out} would delete it: move it out, or generate into another --out; nothing "
                "was changed"
            )


def _not_written(out: Path) -> list[Path]:
    """Paths under ``out`` that the dataset's _datagen.json does not account for."""
    try:
        parts = json.loads(schema.datagen_summary(out).read_text())["parts_per_day"]
        expected = {
            schema.day_folder_name(dt.date.fromisoformat(day)): {
                f"part-{i:05d}.parquet" for i in range(int(n))
            }
            for day, n in parts.items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"{schema.datagen_summary(out)}: cannot read which days it wrote ({exc})"
        ) from None
    foreign = []
    for root in (out, out / TRUTH_DIR):
        for entry in sorted(root.iterdir()) if root.is_dir() else ():
            if root == out and entry.name in (schema.datagen_summary(out).name, TRUTH_DIR):
                continue
            if not entry.is_dir() or entry.name not in expected:
                foreign.append(entry)
                continue
            foreign += [f for f in sorted(entry.iterdir()) if f.name not in expected[entry.name]]
    return foreign


def _id_names(config: DatagenConfig) -> dict[str, pa.Array] | None:
    if config.id_format == "int":
        return None
    counts = {
        schema.USER_ID: config.users,
        schema.ITEM_ID: config.items,
        schema.CATEGORY_ID: config.categories,
    }
    return {
        column: pa.array(
            [f"{ID_PREFIXES[column]}{i}" for i in range(1, counts[column] + 1)], type=pa.string()
        )
        for column in counts
    }


def _model_description() -> dict[str, Any]:
    """The simulation knobs, recorded so a dataset documents how it was made."""
    return {
        "history_length": HISTORY_LENGTH,
        "category_recency_tau_s": CATEGORY_RECENCY_TAU_S,
        "repeat_recency_tau_s": REPEAT_RECENCY_TAU_S,
        "recent_category_effect": RECENT_CATEGORY_EFFECT,
        "repeat_item_effect": REPEAT_ITEM_EFFECT,
        "interest_effect": INTEREST_EFFECT,
        "favourites_per_user": FAVOURITES_PER_USER,
        "favourite_drift_per_day": FAVOURITE_DRIFT_PER_DAY,
        "item_zipf_exponent": ITEM_ZIPF_EXPONENT,
        "appeal_per_log_popularity": APPEAL_PER_LOG_POPULARITY,
        "appeal_quality_sd": APPEAL_QUALITY_SD,
        "user_bias_sd": USER_BIAS_SD,
        "session_mean_events": SESSION_MEAN_EVENTS,
        "hour_click_amplitude": HOUR_CLICK_AMPLITUDE,
        "source_probabilities": dict(
            zip(("theme", "popular", "recent"), SOURCE_PROBABILITIES, strict=True)
        ),
        "slice_seconds": SLICE_SECONDS,
        "popularity_predictor": "item appeal (true history-blind item click propensity)",
    }


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def generate(config: DatagenConfig) -> dict[str, Any]:
    """Write the dataset described by ``config`` atomically; return _datagen.json's content.

    Layout under ``config.out``: ``dt=YYYY-MM-DD/part-NNNNN.parquet`` (raw contract
    columns, rows sorted by timestamp), ``_truth/dt=YYYY-MM-DD/part-NNNNN.parquet``
    (float32 ``p``, row-aligned with the raw part of the same name) and
    ``_datagen.json``.  Parquet bytes depend only on the config (and pyarrow).
    """
    out = config.out
    _check_replaceable(out)
    for stale in remove_stale_temps(out):
        log.info("removed %s left by an interrupted run", stale)
    started = time.perf_counter()
    timer = PhaseTimer(log)
    summary: dict[str, Any] = {
        "generator": "components.datagen",
        "parameters": config.parameters(),
        "model": _model_description(),
        "truth": f"{TRUTH_DIR}/dt=YYYY-MM-DD/<part>.parquet column {TRUTH_COLUMN!r}",
        "rows_per_day": {},
        "parts_per_day": {},
        "click_rate": {},
        "oracle_auc": {},
        "popularity_auc": {},
    }
    with atomic_dir(out) as tmp:
        with timer.phase("world"):
            simulator = _Simulator(config)
            id_names = _id_names(config)
        with timer.phase("days"):
            for day_index, day in enumerate(config.dates):
                day_started = time.perf_counter()
                if day_index:
                    simulator.world.drift_interests(simulator.rng)
                result = simulator.day(day, _DayWriter(tmp, day, config, id_names))
                key = day.isoformat()
                summary["rows_per_day"][key] = result.rows
                summary["parts_per_day"][key] = result.parts
                summary["click_rate"][key] = round(result.clicks / result.rows, 6)
                summary["oracle_auc"][key] = _rounded(result.oracle_auc)
                summary["popularity_auc"][key] = _rounded(result.popularity_auc)
                elapsed = time.perf_counter() - day_started
                log.info(
                    "%s: %d rows in %d part(s), click rate %.4f, oracle AUC %.4f, popularity AUC %.4f, "
                    "%.0f rows/s",
                    key,
                    result.rows,
                    result.parts,
                    result.clicks / result.rows,
                    result.oracle_auc,
                    result.popularity_auc,
                    result.rows / max(elapsed, 1e-9),
                )
        seconds = time.perf_counter() - started
        rows_total = sum(summary["rows_per_day"].values())
        summary["rows_total"] = rows_total
        summary["seconds"] = round(seconds, 3)
        summary["rows_per_second"] = round(rows_total / max(seconds, 1e-9), 1)
        summary["phase_seconds"] = timer.seconds
        atomic_write_json(tmp / schema.DATAGEN_SUMMARY, summary)
    return summary
