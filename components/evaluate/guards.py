"""Guards for broken days: a new day's data compared with the window the champion trained on.

A day whose logging broke -- labels all 0, a sliver of the usual volume, a new id space after an
upstream change, a day delivered twice, a feature whose distribution jumped -- can still train a
model that clears ``min_auc`` and is "not significantly worse" on the broken day itself. So
before a candidate may be blessed, every day of its dataset that the champion never trained on is
compared with the champion's training window, summarised in a :class:`WindowProfile` that each
registered version carries (``components.common.integrity.PROFILE``):

* **volume**: the day's rows over the window's mean rows per day;
* **click rate**: the day's click rate over the window's;
* **new users / new items**: the share of the day's rows whose user (item) the window never saw,
  minus the share a day of the window itself had of users (items) new to the days before it (a new
  id space makes every id new); membership is read from a bitmap of hashed-id residues;
* **replayed rows**: the share of the day's rows that repeat a row of an earlier day of the dataset
  (same user, item, label and second of the day): a day delivered again under a new date;
* **feature drift**: each rate and recency feature's Wasserstein-1 distance from the window's distribution,
  in units of the window's standard deviation, from 100 quantiles (a duplicated day turns every
  user-item pair into a repeat: the user-item counts jump). Not PSI over deciles: many features
  hold a point mass (the prior's logit for an unseen pair) whose value moves a little every day,
  and a decile edge on it turns that move into a "major shift"; the distance moves with it only
  by the little it moved;
* **id drift**: the Jensen-Shannon divergence of the day's item and category mass over the
  window's most frequent ids (the rest as one bucket).

* **concentration**: the largest user's share of the day's rows, minus the largest share one user
  held of a day of the window: one user (a bot, a test account, a crawler) flooding the day.

The test day comes first: the gate's decision rests on it, so it is checked whatever the
reference covers (a champion trained on a later window included), and then every day the
reference never saw.

A small day differs from its window by chance alone: 300 rows cannot fill a thousand ids' mass,
and a day of ten users has ten users' features. So the drift and divergence checks judge what a
day shows **beyond chance**: the value less the 95th percentile of what a day of as many rows
(for the features: as many users, items or categories, whose rows share their values) drawn
from the window itself shows (:func:`chance_js`, :func:`chance_shift`: seeded by the day, so a
re-run finds the same). A feature is measured in at least ``SCALE_FLOOR`` of its own units: a
near-constant one (the prior's logit where no user sees an item twice) moves by hundredths as the
click rate moves, which is no drift however many of its tiny standard deviations that is.

Each check has a threshold (:class:`GuardRule`, a pipeline parameter each); a day over one is a
finding that names the day, the check, the measured value and the threshold, and the candidate is
not blessed. Without a champion (or with one registered before profiles existed) the reference is
the candidate's own training window and the checked days are its validation and test days. The
thresholds' false-alarm rate on normal days and each breakage's detection are measured by
``make bench-gate`` and ``tests/reliability/test_guards.py``.

A profile holds aggregates only: counts, rates, quantiles, the mass of the most frequent id
buckets and bitmaps of the hashed ids' residues (keyed by the deployment's secret), never a row.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from components.common.dataset import DENSE_FEATURES, SPLITS
from components.common.dataset_meta import DatasetMeta

PROFILE_VERSION = 2
READS = (1, 2)
"""Profile versions this code reads: a version 1 profile has no ``top_user_share`` (0)."""
QUANTILES = 100
TOP_IDS = 1000
"""Most frequent item (category) buckets of the window whose mass the id drift compares."""
SAMPLE_ROWS = 200_000
"""Rows (an even stride, deterministic) from which the window's quantiles are taken."""
DRIFT_FEATURES = tuple(
    n for n in DENSE_FEATURES if n.endswith("_click_logit") or "_seconds_since_" in n
)
"""Dense features whose shift is checked: rates and recencies. The counts (``*_log_impressions``,
``*_log_clicks``) grow with the days of history behind a row, so a day late in a window sits
higher than the window's mean by construction (0.6 sd on a normal day of the make-run world,
1.5 on a 5-day window); a broken id or category space shows in the new-id shares and the id
divergence instead."""
SCALE_FLOOR = 0.25
"""Smallest spread (in the feature's log or logit units) a feature's shift is measured in."""
CHANCE_LEVEL = 0.95
"""Quantile of a chance day's value that a day's drift and divergence are judged beyond."""
CHANCE_DRAWS = 100
"""Days drawn from the window to find that quantile."""
CHANCE_SAMPLE = 5000
"""Most values one drawn day holds; a larger day's chance level scales as 1/sqrt(size)."""
_ENTITY = {"user_": "user_key", "item_": "target_item", "category_": "target_cat"}
"""A feature's entity by its name's prefix: a day's rows of one entity share its value."""
BITS = 1 << 22
"""Bits of the seen-id bitmaps (512 KiB each): few collisions up to about a million ids."""
_IDS = {"user": "user_key", "item": "target_item"}


class ProfileError(ValueError):
    """A profile document this code cannot read (the message names the field)."""


@dataclass(frozen=True)
class GuardRule:
    """Thresholds of the guards; a day past any one of them blocks the candidate."""

    min_volume_ratio: float = 0.5
    """A day with fewer rows than this times the window's mean rows per day is broken."""
    max_volume_ratio: float = 3.0
    """A day with more rows than this times the mean is broken too (delivered twice, a bot)."""
    min_click_rate_ratio: float = 0.5
    """A day whose click rate is under this times the window's (clicks logged as non-clicks)."""
    max_click_rate_ratio: float = 2.0
    """A day whose click rate is over this times the window's (non-clicks lost)."""
    max_new_share_increase: float = 0.25
    """Most the share of rows from new users (new items) may exceed the window's (a new id space)."""
    max_replayed_share: float = 0.2
    """Most share of a day's rows that repeat a row of an earlier day (a day delivered twice)."""
    max_feature_shift: float = 1.5
    """Most distance (Wasserstein-1, in window standard deviations) of any dense feature."""
    max_id_js: float = 0.2
    """Most Jensen-Shannon divergence (base 2, 0..1) of the item or category mass."""
    max_user_share_increase: float = 0.2
    """Most the largest user's share of a day's rows may exceed the largest share one user held
    of a day of the window (one user flooding the day)."""
    report_only: bool = False
    """Measure and report the guards but never block on them (a day known to be unusual)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "report_only":
                if not isinstance(value, bool):
                    raise ValueError(f"report_only must be true or false, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{f.name} must be a finite number > 0, got {value!r}")
        if self.min_volume_ratio >= 1 or self.min_click_rate_ratio >= 1:
            raise ValueError("min_volume_ratio and min_click_rate_ratio must be < 1")
        if self.max_volume_ratio <= 1 or self.max_click_rate_ratio <= 1:
            raise ValueError("max_volume_ratio and max_click_rate_ratio must be > 1")
        for name in (
            "max_new_share_increase",
            "max_replayed_share",
            "max_id_js",
            "max_user_share_increase",
        ):
            if getattr(self, name) >= 1:
                raise ValueError(f"{name} must be < 1, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class WindowProfile:
    """What a window of days looked like: the reference a new day is compared with."""

    days: tuple[str, ...]
    """ISO days the window covers (days without rows included)."""
    rows: int
    click_rate: float
    new_share: dict[str, float]
    """`user`/`item`: mean share of a day's rows whose user (item) the window's earlier days
    never saw (its first day left out)."""
    seen: dict[str, str]
    """`user`/`item`: base64 bitmap of the hashed ids' residues modulo :data:`BITS`."""
    quantiles: dict[str, list[float]]
    """Per dense feature: its values at the levels `(i + 0.5) / QUANTILES`."""
    spread: dict[str, float]
    """Per dense feature: its standard deviation over the window."""
    top_ids: dict[str, list[int]]
    """`item`/`category`: the most frequent buckets, most frequent first."""
    id_mass: dict[str, list[float]]
    """Their share of rows, and last the share of every other bucket."""
    top_user_share: float = 0.0
    """The largest share of a day's rows one user held, over the window's days."""
    version: int = PROFILE_VERSION

    @property
    def rows_per_day(self) -> float:
        return self.rows / max(len(self.days), 1)

    def state_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "days": list(self.days)}

    @classmethod
    def from_state(cls, state: Any, source: str = "profile") -> WindowProfile:
        if not isinstance(state, dict):
            raise ProfileError(f"{source}: expected a JSON object")
        if state.get("version") not in READS:
            raise ProfileError(
                f"{source}: profile version {state.get('version')!r}; this code reads "
                f"{', '.join(map(str, READS))}"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        if state["version"] == 1:  # written before the concentration check
            names.discard("top_user_share")
        missing = names - set(state)
        if missing:
            raise ProfileError(f"{source}: fields missing: {sorted(missing)}")
        try:
            return cls(**{**state, "days": tuple(state["days"])})
        except TypeError as exc:
            raise ProfileError(f"{source}: {exc}") from None


@dataclass(frozen=True)
class DayCheck:
    """One day's measured values against the reference (None: not measurable that day)."""

    day: str
    rows: int
    values: dict[str, float | None] = field(default_factory=dict)
    chance: dict[str, float] = field(default_factory=dict)
    """Per drift and divergence check: the value a day of this size shows by chance (the
    `CHANCE_LEVEL` quantile); the check judges `values[name] - chance[name]`."""

    def beyond_chance(self, name: str) -> float | None:
        value = self.values.get(name)
        return None if value is None else value - self.chance.get(name, 0.0)


def _days(ts: np.ndarray) -> np.ndarray:
    return (np.asarray(ts, dtype=np.int64) // 86_400).astype(np.int64)


def _columns(arrays: list[dict[str, np.ndarray]], rows: np.ndarray | None = None):
    """The arrays the guards read, concatenated over splits (``rows`` picks rows of the whole)."""
    out = {}
    for name in ("dense", "label", "ts", "target_item", "target_cat", "user_key"):
        joined = np.concatenate([np.asarray(a[name]) for a in arrays])
        out[name] = joined if rows is None else joined[rows]
    return out


def build_profile(arrays: list[dict[str, np.ndarray]], days: tuple[str, ...]) -> WindowProfile:
    """The profile of the rows of ``arrays`` (split arrays: dense, label, ts, target_*)."""
    c = _columns(arrays)
    rows = len(c["label"])
    if rows == 0:
        raise ProfileError("a window without rows has no profile")
    dense = c["dense"]
    step = max(1, rows // SAMPLE_ROWS)
    sample = dense[::step].astype(np.float64)
    levels = _levels(sample)
    quantiles = {n: [float(x) for x in levels[:, j]] for j, n in enumerate(DENSE_FEATURES)}
    spread = {n: float(x) for n, x in zip(DENSE_FEATURES, sample.std(axis=0), strict=True)}
    top_ids, id_mass = {}, {}
    for kind, column in (("item", "target_item"), ("category", "target_cat")):
        ids, counts = np.unique(c[column], return_counts=True)
        order = np.lexsort((ids, -counts))[:TOP_IDS]  # ties by id: deterministic
        top_ids[kind] = [int(i) for i in ids[order]]
        mass = counts[order] / rows
        id_mass[kind] = [*map(float, mass), float(max(0.0, 1.0 - mass.sum()))]
    return WindowProfile(
        days=tuple(days),
        rows=rows,
        click_rate=float(np.mean(c["label"])),
        new_share={k: _new_share(c[column], _days(c["ts"])) for k, column in _IDS.items()},
        seen={k: _bitmap(c[column]) for k, column in _IDS.items()},
        quantiles=quantiles,
        spread=spread,
        top_ids=top_ids,
        id_mass=id_mass,
        top_user_share=_top_user_share(c["user_key"], _days(c["ts"])),
    )


def _largest_share(ids: np.ndarray) -> float:
    """The largest share of ``ids`` one value holds (0 for none)."""
    if not len(ids):
        return 0.0
    _, counts = np.unique(ids, return_counts=True)
    return float(counts.max() / len(ids))


def _top_user_share(users: np.ndarray, days: np.ndarray) -> float:
    """The largest share of a day's rows one user held, over the days."""
    return max((_largest_share(users[days == d]) for d in np.unique(days)), default=0.0)


def _new_share(ids: np.ndarray, days: np.ndarray) -> float:
    """Mean over the window's days but its first of the share of rows whose id is new that day."""
    _, key = np.unique(ids, return_inverse=True)
    first = np.full(int(key.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, key, days)
    new = first[key] == days
    shares = [new[days == d].mean() for d in np.unique(days)[1:]]
    return float(np.mean(shares)) if shares else 0.0


def _residues(ids: np.ndarray) -> np.ndarray:
    return (np.asarray(ids).astype(np.int64) % BITS).astype(np.int64)


def _bitmap(ids: np.ndarray) -> str:
    import base64

    bits = np.zeros(BITS, dtype=bool)
    bits[_residues(ids)] = True
    return base64.b64encode(np.packbits(bits).tobytes()).decode()


def _unbitmap(text: str) -> np.ndarray:
    import base64

    return np.unpackbits(np.frombuffer(base64.b64decode(text), dtype=np.uint8))[:BITS].astype(bool)


def replayed(c: dict[str, np.ndarray]) -> np.ndarray:
    """Per row: whether an earlier day holds a row of the same user, item, label and second of
    the day (a day delivered again under another date repeats every row of its original)."""
    ts = np.asarray(c["ts"], dtype=np.int64)
    rows = np.stack(
        [np.asarray(c["user_key"], np.int64), c["target_item"], c["label"], ts % 86_400], axis=1
    )
    _, key = np.unique(rows, axis=0, return_inverse=True)
    key = key.ravel()
    days = _days(ts)
    first = np.full(int(key.max()) + 1 if len(key) else 0, np.iinfo(np.int64).max)
    np.minimum.at(first, key, days)
    return first[key] < days


def _levels(values: np.ndarray) -> np.ndarray:
    """Each column's values at the levels ``(i + 0.5) / QUANTILES`` (one row per level)."""
    return np.quantile(values, (np.arange(QUANTILES) + 0.5) / QUANTILES, axis=0)


def shift(reference: list[float], spread: float, values: np.ndarray) -> float:
    """Wasserstein-1 distance of ``values`` from the reference quantiles, in units of ``spread``
    (the mean gap between the two quantile functions) or ``SCALE_FLOOR``, whichever is larger."""
    gap = float(np.mean(np.abs(np.asarray(reference) - _levels(values.astype(np.float64)))))
    return gap / max(spread, SCALE_FLOOR)


def _rng(day: str, name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{day}/{name}".encode()))


def chance_js(mass: list[float], rows: int, rng: np.random.Generator) -> float:
    """The divergence from ``mass`` that a day of ``rows`` rows drawn from it reaches by chance
    (the ``CHANCE_LEVEL`` quantile over ``CHANCE_DRAWS`` days)."""
    p = np.asarray(mass, dtype=np.float64)
    p = p / p.sum()
    draws = rng.multinomial(rows, p, size=CHANCE_DRAWS)
    return float(np.quantile([js_divergence(p, d) for d in draws], CHANCE_LEVEL))


def chance_shift(reference: list[float], spread: float, n: int, rng: np.random.Generator) -> float:
    """The shift from the reference quantiles that ``n`` values drawn from them reach by chance
    (the ``CHANCE_LEVEL`` quantile over ``CHANCE_DRAWS`` draws; past ``CHANCE_SAMPLE`` values
    the level is scaled by ``sqrt(CHANCE_SAMPLE / n)``, as a sample's quantiles converge)."""
    q = np.asarray(reference, dtype=np.float64)
    m = max(1, min(n, CHANCE_SAMPLE))
    at = (np.arange(len(q)) + 0.5) / len(q)
    # values of the reference's quantile function at uniform levels (between its quantiles)
    drawn = np.interp(rng.uniform(size=(CHANCE_DRAWS, m)), at, q)
    levels = np.quantile(drawn, (np.arange(QUANTILES) + 0.5) / QUANTILES, axis=1)  # [Q, draws]
    gaps = np.mean(np.abs(q[:, None] - levels), axis=0) / max(spread, SCALE_FLOOR)
    return float(np.quantile(gaps, CHANCE_LEVEL)) * math.sqrt(m / max(n, 1))


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence in bits (0: the same mass, 1: disjoint)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(x: np.ndarray) -> float:
        nz = x > 0
        return float(np.sum(x[nz] * np.log2(x[nz] / m[nz])))

    return max(0.0, (kl(p) + kl(q)) / 2)


def check_day(reference: WindowProfile, day: str, c: dict[str, np.ndarray]) -> DayCheck:
    """The measured values of one day's rows ``c`` against ``reference``, with the chance levels
    of its drift and divergence checks."""
    rows = len(c["label"])
    values: dict[str, float | None] = {"volume": rows / reference.rows_per_day}
    chance: dict[str, float] = {}
    values["click_rate"] = (
        float(np.mean(c["label"])) / reference.click_rate if rows and reference.click_rate else None
    )
    for kind, column in _IDS.items():
        unseen = ~_unbitmap(reference.seen[kind])[_residues(c[column])]
        values[f"new_{kind}s"] = float(unseen.mean()) - reference.new_share[kind] if rows else None
    values["replayed"] = float(np.mean(c["replayed"])) if rows and "replayed" in c else None
    values["user_share"] = (
        _largest_share(c["user_key"]) - reference.top_user_share if rows else None
    )
    for name in DRIFT_FEATURES:
        key = f"shift:{name}"
        if not rows:
            values[key] = None
            continue
        j = DENSE_FEATURES.index(name)
        q, spread = reference.quantiles[name], reference.spread[name]
        values[key] = shift(q, spread, c["dense"][:, j])
        entity = next(col for prefix, col in _ENTITY.items() if name.startswith(prefix))
        units = len(np.unique(c[entity]))
        chance[key] = chance_shift(q, spread, units, _rng(day, key))
    for kind, column in (("item", "target_item"), ("category", "target_cat")):
        key = f"js:{kind}"
        if not rows:
            values[key] = None
            continue
        top = np.asarray(reference.top_ids[kind], dtype=np.int64)
        order = np.argsort(top)
        where = np.searchsorted(top[order], c[column])
        where = np.minimum(where, len(top) - 1)
        hit = top[order][where] == c[column]
        counts = np.bincount(order[where[hit]], minlength=len(top)) / rows
        values[key] = js_divergence(
            reference.id_mass[kind], [*counts, max(0.0, 1.0 - counts.sum())]
        )
        chance[key] = chance_js(reference.id_mass[kind], rows, _rng(day, key))
    return DayCheck(day=day, rows=rows, values=values, chance=chance)


def findings(check: DayCheck, rule: GuardRule) -> list[str]:
    """One line per threshold the day crosses: the day, the check, the value, the threshold."""
    out = []
    v = check.values

    def band(name: str, what: str, low: float, high: float) -> None:
        x = v.get(name)
        if x is not None and not low <= x <= high:
            out.append(
                f"{check.day}: {what} {x:.3g}x the window's, outside {low:g}..{high:g}x"
                f" ({check.rows:,} rows)"
            )

    band("volume", "rows", rule.min_volume_ratio, rule.max_volume_ratio)
    band("click_rate", "click rate", rule.min_click_rate_ratio, rule.max_click_rate_ratio)

    # (value, threshold's name, the finding's words: "{x}" is the value, formatted)
    limits = [
        *(
            (
                f"new_{k}s",
                "max_new_share_increase",
                f"share of rows from new {k}s {{x:+.3f}} above the window's",
            )
            for k in ("user", "item")
        ),
        (
            "user_share",
            "max_user_share_increase",
            "one user holds {x:+.1%} more of its rows than any user held of a day of the window",
        ),
        (
            "replayed",
            "max_replayed_share",
            "{x:.1%} of its rows repeat rows of an earlier day (same user, item, label and second)",
        ),
        *(
            (f"js:{k}", "max_id_js", f"{k} ids drifted, Jensen-Shannon {{x:.3f}} beyond chance")
            for k in ("item", "category")
        ),
    ]
    for name, limit, words in limits:
        x = check.beyond_chance(name)
        if x is not None and x > getattr(rule, limit):
            out.append(f"{check.day}: {words.format(x=x)}, over {limit} {getattr(rule, limit):g}")
    drifts = {k[6:]: check.beyond_chance(k) for k in v if k.startswith("shift:")}
    over = [k for k, x in drifts.items() if x is not None and x > rule.max_feature_shift]
    if over:
        worst = max(over, key=drifts.get)
        more = f" (and {len(over) - 1} more)" if len(over) > 1 else ""
        out.append(
            f"{check.day}: feature {worst} moved {drifts[worst]:.2f} standard deviations beyond "
            f"chance, over max_feature_shift {rule.max_feature_shift:g}{more}"
        )
    return out


def split_arrays_of(data: str | Path, meta: DatasetMeta, splits: tuple[str, ...]) -> list[dict]:
    from components.train.data import SplitArrays

    return [SplitArrays(data, s, meta).arrays for s in splits if meta.split(s).rows]


@dataclass
class WindowRows:
    """The columns the guards read of a dataset's splits, read once: ``columns`` over train, val
    and test in that order, the first ``train_rows`` of them the training split."""

    meta: DatasetMeta
    columns: dict[str, np.ndarray]
    train_rows: int

    @classmethod
    def read(cls, data: str | Path, meta: DatasetMeta) -> WindowRows:
        arrays = split_arrays_of(data, meta, ("train", "val", "test"))
        return cls(meta, _columns(arrays), meta.split("train").rows)


def training_profile(rows: WindowRows) -> WindowProfile:
    """The profile of a dataset's training split: what a model trained on it has seen."""
    train = {k: a[: rows.train_rows] for k, a in rows.columns.items()}
    return build_profile([train], rows.meta.split("train").day_list)


def guarded_days(meta: DatasetMeta, reference: WindowProfile) -> tuple[list[str], list[str]]:
    """``(test days, then every other day after the reference's last, in order; the test days)``:
    the days a decision on this dataset rests on. The test days are checked whatever the
    reference covers: the gate judges the candidate on them."""
    last = dt.date.fromisoformat(reference.days[-1]) if reference.days else dt.date.min
    tests = list(meta.split("test").day_list)
    later = [
        day
        for split in SPLITS
        for day in meta.split(split).day_list
        if dt.date.fromisoformat(day) > last and day not in tests
    ]
    return [*tests, *later], tests


def run_guards(rows: WindowRows, reference: WindowProfile, rule: GuardRule) -> dict[str, Any]:
    """The test day first, then every day of the dataset after ``reference``'s last day, checked:
    ``{"reference", "days", "test_days", "findings", "blocked"}``."""
    meta = rows.meta
    c = dict(rows.columns)
    c["replayed"] = replayed(c)
    epoch_days = _days(c["ts"])
    checked = []
    days, tests = guarded_days(meta, reference)
    for day in days:
        epoch = (dt.date.fromisoformat(day) - dt.date(1970, 1, 1)).days
        picked = np.flatnonzero(epoch_days == epoch)
        checked.append(check_day(reference, day, {k: a[picked] for k, a in c.items()}))
    lines = [line for check in checked for line in findings(check, rule)]
    return {
        "reference": {
            "days": f"{reference.days[0]} .. {reference.days[-1]}",
            "rows": reference.rows,
        },
        "days": [dataclasses.asdict(ch) for ch in checked],
        "test_days": tests,
        "findings": lines,
        "blocked": bool(lines) and not rule.report_only,
        "rule": dataclasses.asdict(rule),
    }
