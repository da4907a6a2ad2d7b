"""Does the champion gate's interval mean what it says? Coverage, false refusals and power by simulation.

The gate compares candidate and champion on one test day with users as the unit
(``components.evaluate.metrics.clustered_delong``). This benchmark draws many test days from
worlds whose users have correlated rows -- each user has a taste, and each model misjudges
each user by an offset of its own, so a user's rows err together as they do in click logs --
and checks, where the truth is known:

* **coverage**: how often the 95% interval holds the true AUC difference, users as the unit
  and rows as the unit (DeLong), for an equal pair of models (A/A: two models of the same
  quality with independent errors; the true difference is 0) and for a planted loss (the
  champion's per-user errors shrunk, so the candidate is worse by a known amount, measured on
  a population of 200,000 users);
* **false refusals**: how often the gate refuses an equal candidate, at each tolerance;
* **power**: how often it refuses the planted loss, beside the power the day's detectable
  effect predicts (a check of that figure);
* **few users**: coverage of an equal pair on days of few users (and one user holding most of
  a day), by the day's effective number of users: where the gate's ``MIN_EFFECTIVE_USERS``
  comes from, measured again here beside the value the code declares;
* **speed**: one comparison of a production-sized day, 10 M rows from 1 M users;
* **data guards**: on generated logs, every normal day checked against the previous day's
  training window as the daily pipeline checks it (false alarms), and each kind of breakage
  injected into the newest day (``components.datagen.breakage``): found, by which check.

    python -m benchmarks.gate            # ~6 min on 2 cores -> benchmarks/results/gate.json
    python -m benchmarks.gate --quick    # fewer days: a smoke test
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

from benchmarks.measure import machine
from benchmarks.readme import quick_main
from components.evaluate.decision import GateRule
from components.evaluate.metrics import (
    MIN_EFFECTIVE_USERS,
    clustered_delong,
    delong,
    detectable_effect,
)

NAME = "gate"
TOLERANCES = (0.0, 0.001, 0.002, 0.005)
"""Tolerances whose false-refusal rate and power are measured; the shipped one is GateRule's."""
POPULATION_USERS = 200_000
"""Users of the large draw that measures a planted loss's true size."""
FEW_USERS = (4, 6, 10, 15, 20, 25, 30, 40, 60, 80, 120)
"""Users per day of the few-users draws."""
EFFECTIVE_EDGES = (0, 5, 10, 15, 20, 25, 35, 50, 1_000_000)
"""Bins of the effective number of users the few-users coverage is reported in."""
COVERAGE_FLOOR = 0.93
"""Coverage a 95% interval must reach (at most 2 points short) for the gate to read it."""


@dataclass(frozen=True)
class World:
    """A test day's users and how two models err about them."""

    name: str
    users: int
    """Users on one test day."""
    rows_per_user: float
    """Mean rows per user; the count is lognormal, so a few users hold many rows."""
    spread: float
    """Lognormal sigma of the rows per user (0: every user has the same count)."""
    taste: float
    """Sd of the users' click propensity (logit scale)."""
    user_error: float
    """Sd of each model's offset per user: the correlation within a user's rows."""
    row_error: float
    """Sd of each model's error per row."""
    loss_error: float
    """The champion's per-user error in the planted-loss pair (below ``user_error``)."""


WORLDS = (
    World("many light users", 2_000, 10, 0.5, 1.0, 0.6, 0.8, 0.35),
    World("few heavy users", 300, 60, 0.8, 1.0, 1.0, 0.5, 0.75),
    World("heavy-tailed users", 800, 25, 1.2, 0.8, 0.8, 0.6, 0.55),
)


def draw_day(world: World, rng: np.random.Generator, users: int, champion_error: float):
    """Labels, candidate and champion scores and user ids of one test day."""
    counts = np.maximum(
        1,
        np.round(
            world.rows_per_user * rng.lognormal(-(world.spread**2) / 2, world.spread, users)
        ).astype(np.int64),
    )
    user = np.repeat(np.arange(users), counts)
    rows = len(user)
    taste = rng.normal(0.0, world.taste, users)[user]
    quality = rng.normal(0.0, 1.0, rows)
    labels = rng.uniform(size=rows) < 1.0 / (1.0 + np.exp(-(taste + quality - 2.0)))

    def model(user_error: float) -> np.ndarray:
        return (
            taste
            + quality
            + rng.normal(0.0, user_error, users)[user]
            + rng.normal(0.0, world.row_error, rows)
        )

    return labels.astype(np.int8), model(world.user_error), model(champion_error), user


def true_delta(world: World, seed: int) -> float:
    """The planted loss's size on a population of users (its own standard error is tiny)."""
    labels, a, b, user = draw_day(
        world, np.random.default_rng(seed), POPULATION_USERS, world.loss_error
    )
    return delong(a, b, labels)["delta"]


def simulate(world: World, champion_error: float, truth: float, days: int, seed: int) -> dict:
    """Coverage, refusals and interval widths over ``days`` simulated test days."""
    rng = np.random.default_rng(seed)
    rule = GateRule()
    covered = {"users": 0, "rows": 0}
    refused = dict.fromkeys(TOLERANCES, 0)
    se_users, se_rows, predicted_power, rows = [], [], [], []
    z_c = NormalDist().inv_cdf(0.5 + rule.confidence / 2)
    for _ in range(days):
        labels, a, b, user = draw_day(world, rng, world.users, champion_error)
        result = clustered_delong(a, b, labels, user, rule.confidence)
        covered["users"] += result["ci_low"] <= truth <= result["ci_high"]
        covered["rows"] += result["iid"]["ci_low"] <= truth <= result["iid"]["ci_high"]
        for tolerance in TOLERANCES:
            refused[tolerance] += result["ci_high"] < -tolerance
        se_users.append(result["se"])
        se_rows.append(result["iid"]["se"])
        rows.append(len(labels))
        # the refusal probability the day's own standard error predicts for this truth
        predicted_power.append(NormalDist().cdf((-truth - rule.tolerance) / result["se"] - z_c))
    return {
        "days": days,
        "true_delta": truth,
        "rows_per_day": float(np.mean(rows)),
        "coverage_users": covered["users"] / days,
        "coverage_rows": covered["rows"] / days,
        "refused": {str(t): refused[t] / days for t in TOLERANCES},
        "predicted_refused": float(np.mean(predicted_power)),
        "se_users": float(np.mean(se_users)),
        "se_rows": float(np.mean(se_rows)),
        "detectable_effect": detectable_effect(
            float(np.mean(se_users)), rule.tolerance, rule.confidence
        ),
    }


def few_users(world: World, days: int, seed: int) -> list[tuple[float, bool]]:
    """``(effective users, whether the interval held 0)`` of equal-pair days of ``FEW_USERS``
    users, and as many days whose first user holds 80% of the rows."""
    rng = np.random.default_rng(seed)
    out = []
    for users in FEW_USERS:
        for i in range(days):
            labels, a, b, user = draw_day(world, rng, users, world.user_error)
            if i % 2:  # every other day, one user holds 80% of it
                rest = np.flatnonzero(user != 0)
                heavy = rng.choice(rest, size=4 * len(rest), replace=True)
                labels, a, b = (np.r_[x, x[heavy]] for x in (labels, a, b))
                user = np.r_[user, np.zeros(len(heavy), user.dtype)]
            if labels.all() or not labels.any():
                continue
            r = clustered_delong(a, b, labels, user)
            if math.isfinite(r["se"]):
                out.append((r["effective_users"], bool(r["ci_low"] <= 0.0 <= r["ci_high"])))
    return out


def coverage_by_effective_users(days: list[tuple[float, bool]]) -> list[dict]:
    """Coverage per bin of ``EFFECTIVE_EDGES``: ``{"from", "to", "days", "coverage"}``."""
    effective = np.array([d[0] for d in days])
    held = np.array([d[1] for d in days])
    bins = []
    for low, high in zip(EFFECTIVE_EDGES, EFFECTIVE_EDGES[1:], strict=False):
        inside = (effective >= low) & (effective < high)
        if inside.any():
            bins.append(
                {
                    "from": low,
                    "to": high,
                    "days": int(inside.sum()),
                    "coverage": float(held[inside].mean()),
                }
            )
    return bins


def sound_from(worlds: list[list[dict]]) -> float:
    """The smallest bin start from which each world's days, pooled, cover ``COVERAGE_FLOOR`` (a
    bin alone holds too few days to judge: pooled, the days past a start are judged together)."""
    for start in sorted({b["from"] for bins in worlds for b in bins}):
        pooled = [[b for b in bins if b["from"] >= start] for bins in worlds]
        if all(
            sum(b["coverage"] * b["days"] for b in bins)
            >= COVERAGE_FLOOR * sum(b["days"] for b in bins)
            for bins in pooled
            if bins
        ):
            return float(start)
    return math.inf


def concentration(quick: bool) -> dict:
    days = 30 if quick else 300
    worlds = [coverage_by_effective_users(few_users(w, days, 40 + i)) for i, w in enumerate(WORLDS)]
    return {
        "days_per_size": days,
        "users": list(FEW_USERS),
        "worlds": {w.name: bins for w, bins in zip(WORLDS, worlds, strict=True)},
        "coverage_floor": COVERAGE_FLOOR,
        "sound_from": sound_from(worlds),
        "declared": MIN_EFFECTIVE_USERS,
    }


def speed(rows: int, users: int, seed: int = 0) -> dict:
    """Seconds of one comparison of a production-sized test day (users as the unit and DeLong)."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, rows)
    taste = rng.normal(0, 1, users)[user]
    labels = (rng.uniform(size=rows) < 1 / (1 + np.exp(-(taste - 2)))).astype(np.int8)
    a = (taste + rng.normal(0, 1, rows)).astype(np.float32)
    b = (taste + rng.normal(0, 1.1, rows)).astype(np.float32)
    started = time.perf_counter()
    clustered_delong(a, b, labels, user)
    clustered = time.perf_counter() - started
    started = time.perf_counter()
    delong(a, b, labels)
    return {
        "rows": rows,
        "users": users,
        "clustered_seconds": round(clustered, 2),
        "delong_seconds": round(time.perf_counter() - started, 2),
    }


GUARD_WORLD = {"users": 4000, "items": 3000, "categories": 60, "events_per_day": 12_000}
"""The guards' generated world (a smaller make-run world: the guards read rates and shares)."""


GUARD_WINDOW, GUARD_HISTORY = 11, 3
"""Window and history days of the guards' datasets: the daily pipeline's defaults."""


def _guard_dataset(source, end, out):
    """The window ending ``end`` of the raw logs ``source``, preprocessed into ``out``: its meta."""
    from components.common.dataset_meta import DatasetMeta
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import preprocess

    preprocess(
        PreprocessConfig(
            raw=str(source),
            out=str(out),
            end_date=end,
            days=GUARD_WINDOW,
            history_days=GUARD_HISTORY,
        )
    )
    return DatasetMeta.read(out)


def _normal_days(raw, root, ends, rule) -> tuple[dict, list, int, dict]:
    """Each day's window checked against the day before's profile, as yesterday's champion
    would be: ``(profiles by end day, alarms, day checks, largest value by check)``."""
    import datetime as dt
    import shutil

    from components.evaluate.guards import WindowRows, run_guards, training_profile

    profiles, alarms, checked, largest = {}, [], 0, {}
    for end in ends:
        data = root / f"d{end}"
        meta = _guard_dataset(raw, end, data)
        rows = WindowRows.read(data, meta)
        profiles[end] = training_profile(rows)
        before = profiles.get(end - dt.timedelta(days=1))
        if before is not None:  # yesterday's model is the champion
            result = run_guards(rows, before, rule)
            alarms += result["findings"]
            checked += len(result["days"])
            for day in result["days"]:
                for name, value in day["values"].items():
                    kind = name.split(":")[0]
                    if value is not None:
                        largest[kind] = max(largest.get(kind, -math.inf), value)
        shutil.rmtree(data)
    return profiles, alarms, checked, largest


def _breakages(raw, root, last, profile, rule) -> list[dict]:
    """Each breakage applied to the last day of a copy of ``raw``, checked against ``profile``."""
    import shutil

    from components.datagen.breakage import BREAKAGES, break_day
    from components.evaluate.guards import WindowRows, run_guards

    detected = []
    for name, (breakage, words) in BREAKAGES.items():
        copy = root / "broken"
        shutil.copytree(raw, copy)
        break_day(copy, last, breakage)
        data = root / "broken-data"
        meta = _guard_dataset(copy, last, data)
        result = run_guards(WindowRows.read(data, meta), profile, rule)
        named = [f for f in result["findings"] if f.startswith(last.isoformat())]
        detected.append(
            {
                "breakage": name,
                "blocked": result["blocked"],
                "expected_check_named": any(words in f for f in named),
                "findings": named,
            }
        )
        shutil.rmtree(copy)
        shutil.rmtree(data)
    return detected


def guards(quick: bool, seed: int = 21) -> dict:
    """False alarms of the data guards over normal days, and each breakage's detection."""
    import datetime as dt
    import tempfile
    from pathlib import Path

    from components.datagen import DatagenConfig, generate
    from components.evaluate.guards import GuardRule

    normal_days = 4 if quick else 24
    first = dt.date(2026, 1, 1)
    total = GUARD_HISTORY + GUARD_WINDOW + normal_days
    rule = GuardRule()
    with tempfile.TemporaryDirectory(prefix="bench-guards-") as tmp:
        root = Path(tmp)
        raw = root / "raw"
        generate(DatagenConfig(out=raw, days=total, seed=seed, **GUARD_WORLD))
        last = first + dt.timedelta(days=total - 1)
        ends = [last - dt.timedelta(days=i) for i in range(normal_days, -1, -1)]
        profiles, alarms, checked, largest = _normal_days(raw, root, ends, rule)
        detected = _breakages(raw, root, last, profiles[last - dt.timedelta(days=1)], rule)
    return {
        "world": {**GUARD_WORLD, "window_days": GUARD_WINDOW, "history_days": GUARD_HISTORY},
        "runs": len(ends) - 1,
        "day_checks": checked,
        "false_alarms": len(alarms),
        "alarms": alarms,
        "largest_on_normal_days": largest,
        "breakages": detected,
    }


REAL_OFFSET_SD = 0.3
"""Sd of the per-user logit offset planted into the real-logs candidate (a loss of about 0.01)."""


def real_logs(quick: bool, seed: int = 31) -> dict:
    """The interval on real logs: MovieLens-100K with the quality benchmark's window and split
    (``benchmarks.quality``), where a user's rows are as correlated as real users make them.
    LightGBM and the item prior, fitted on its training days, score its test weeks.

    * **A/A**: for each draw, each user's rows are scored by LightGBM on one side and the item
      prior on the other, the side drawn at random per user: the two sides are exchangeable,
      so the true difference is 0 on any set of users.
    * **planted loss**: LightGBM against LightGBM with a fixed random logit offset per user
      (sd ``REAL_OFFSET_SD``), on half of the test users drawn without replacement. The truth is
      the difference on all test users; as a half-sample varies around the whole by
      ``sqrt(1 - 1/2)`` of what an unbounded population would give, the intervals are narrowed
      by that finite-population factor before they are checked. Refusals are counted with the
      intervals as the gate computes them (half the users, no factor)."""
    from pathlib import Path

    from benchmarks import quality, worlds

    world = next(w for w in worlds.WORLDS if w.source != "synthetic")
    _, data = worlds.prepare(world, Path(worlds.SCRATCH))
    splits = {s: quality.split_arrays(data, s) for s in ("train", "val", "test")}
    xy = {s: (quality.tabular(a)[0], np.asarray(a["label"])) for s, a in splits.items()}
    lightgbm, _ = quality.lightgbm_scores(xy["train"], xy["val"], xy["test"])
    column = quality.DENSE_FEATURES.index("item_click_logit")
    prior = np.asarray(splits["test"]["dense"][:, column], np.float64)
    labels, user = xy["test"][1], np.unique(splits["test"]["user_key"], return_inverse=True)[1]
    users = int(user.max()) + 1
    logit = np.log(lightgbm) - np.log1p(-lightgbm)
    rng = np.random.default_rng(seed)
    days = 60 if quick else 1000
    rule = GateRule()

    def counted(results, truth: float, scale: float = 1.0) -> dict:
        def covers(r):
            mid = (r["ci_low"] + r["ci_high"]) / 2
            return abs(truth - mid) <= scale * (r["ci_high"] - r["ci_low"]) / 2

        return {
            "days": len(results),
            "true_delta": truth,
            "rows_per_day": float(np.mean([r["rows"] for r in results])),
            "users_per_day": float(np.mean([r["users"] for r in results])),
            "coverage_users": float(np.mean([covers(r) for r in results])),
            "coverage_rows": float(np.mean([covers(r["iid"]) for r in results])),
            "refused": float(np.mean([r["ci_high"] < -rule.tolerance for r in results])),
            "se_users": float(np.mean([r["se"] for r in results])),
            "se_rows": float(np.mean([r["iid"]["se"] for r in results])),
        }

    equal = []
    for _ in range(days):
        side = (rng.uniform(size=users) < 0.5)[user]
        a, b = np.where(side, logit, prior), np.where(side, prior, logit)
        equal.append({**clustered_delong(a, b, labels, user), "rows": len(labels)})
    degraded = logit + rng.normal(0.0, REAL_OFFSET_SD, users)[user]
    truth = clustered_delong(degraded, logit, labels, user)["delta"]
    loss = []
    for _ in range(days):
        picked = np.isin(user, rng.choice(users, users // 2, replace=False))
        r = clustered_delong(degraded[picked], logit[picked], labels[picked], user[picked])
        loss.append({**r, "rows": int(picked.sum())})
    return {
        "world": {"name": world.name, "source": world.source, "test_users": users},
        "offset_sd": REAL_OFFSET_SD,
        "equal": counted(equal, 0.0),
        "loss": counted(loss, truth, scale=math.sqrt(1 - (users // 2) / users)),
        "guards": real_guards(data),
    }


def real_guards(data) -> dict:
    """The data guards on the real logs' validation and test days against their training window
    (as a first run, with no champion, checks them): days flagged, findings per check."""
    import re
    from collections import Counter

    from components.common.dataset_meta import DatasetMeta
    from components.evaluate.guards import GuardRule, WindowRows, run_guards, training_profile

    rows = WindowRows.read(data, DatasetMeta.read(data))
    result = run_guards(rows, training_profile(rows), GuardRule())

    def check(line: str) -> str:
        limit = re.search(r"over (max_\w+)", line)
        return limit.group(1) if limit else line.split(": ", 1)[1].split(" ")[0] + " band"

    return {
        "days": len(result["days"]),
        "rows_per_day": float(np.mean([d["rows"] for d in result["days"]])),
        "days_flagged": len({line.split(": ", 1)[0] for line in result["findings"]}),
        "findings_by_check": dict(Counter(check(line) for line in result["findings"])),
    }


def measure(quick: bool) -> dict:
    days = 60 if quick else 1000
    worlds = []
    for i, world in enumerate(WORLDS):
        started = time.perf_counter()
        truth = true_delta(world, seed=1000 + i)
        worlds.append(
            {
                "world": asdict(world),
                "equal": simulate(world, world.user_error, 0.0, days, seed=10 + i),
                "loss": simulate(world, world.loss_error, truth, days, seed=20 + i),
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
        print(
            f"{world.name}: coverage {worlds[-1]['equal']['coverage_users']:.3f} (users) vs "
            f"{worlds[-1]['equal']['coverage_rows']:.3f} (rows); planted loss {-truth:.4f}",
            flush=True,
        )
    return {
        "benchmark": NAME,
        "machine": machine(),
        "quick": quick,
        "confidence": GateRule().confidence,
        "tolerance": GateRule().tolerance,
        "worlds": worlds,
        "few_users": concentration(quick),
        "speed": speed(1_000_000, 100_000) if quick else speed(10_000_000, 1_000_000),
        "guards": guards(quick),
        "real_logs": real_logs(quick),
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def readme_table(result: dict) -> str:
    m = result["machine"]
    shipped = str(result["tolerance"])
    conf = f"{100 * result['confidence']:.0f}%"
    days = result["worlds"][0]["equal"]["days"]
    lines = [
        f"Measured by `make bench-gate` on {m['cpus']} cores ({m['cpu_model']}): {days} simulated "
        f"test days per world and case{' (--quick)' if result['quick'] else ''}. Coverage: how "
        f"often the {conf} interval holds the true AUC difference (goal 93–97%). "
        f"Refusals at the shipped tolerance {shipped}.",
        "",
        "| world | rows/day | users | case | true Δ | coverage, users as unit | coverage, rows as unit "
        "(DeLong) | se ratio | refused | predicted | detectable effect |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in result["worlds"]:
        for case, label in (("equal", "equal (A/A)"), ("loss", "planted loss")):
            r = w[case]
            lines.append(
                f"| {w['world']['name']} | {r['rows_per_day']:,.0f} | {w['world']['users']:,} | "
                f"{label} | {r['true_delta']:+.4f} | {_pct(r['coverage_users'])} | "
                f"{_pct(r['coverage_rows'])} | {r['se_users'] / r['se_rows']:.2f}x | "
                f"{_pct(r['refused'][shipped])} | {_pct(r['predicted_refused'])} | "
                f"{r['detectable_effect']:.4f} |"
            )
    lines += [
        "",
        "False refusals of an equal candidate and power against the planted loss, by tolerance:",
        "",
        "| world | "
        + " | ".join(f"tolerance {t}: false refusals / power" for t in TOLERANCES)
        + " |",
        "|---|" + "---|" * len(TOLERANCES),
    ]
    for w in result["worlds"]:
        cells = [
            f"{_pct(w['equal']['refused'][str(t)])} / {_pct(w['loss']['refused'][str(t)])}"
            for t in TOLERANCES
        ]
        lines.append(f"| {w['world']['name']} | " + " | ".join(cells) + " |")
    s = result["speed"]
    lines += [
        "",
        f"One comparison of {s['rows']:,} rows from {s['users']:,} users: "
        f"{s['clustered_seconds']:.1f} s with users as the unit, {s['delong_seconds']:.1f} s "
        "with rows as the unit.",
        "",
        *few_users_table(result.get("few_users")),
        *real_table(result.get("real_logs")),
        *guard_table(result["guards"]),
    ]
    return "\n".join(lines)


def few_users_table(r: dict | None) -> list[str]:
    """Coverage by effective users: where the gate stops reading the interval."""
    if not r:
        return []
    edges = sorted({(b["from"], b["to"]) for bins in r["worlds"].values() for b in bins})
    lines = [
        f"Days of few users (an equal pair, {', '.join(map(str, r['users']))} users, every other "
        f"day one user holding 80% of it; {r['days_per_size']} days per size): coverage by the "
        f"day's effective number of users. From {r['sound_from']:g} effective users on, each "
        f"world's days together cover at least {_pct(r['coverage_floor'])}; the gate declares `MIN_EFFECTIVE_USERS` = "
        f"{r['declared']:g}"
        + (
            " (in line)."
            if r["declared"] >= r["sound_from"]
            else " (**under what this run measured**)."
        ),
        "",
        "| world | "
        + " | ".join(f"{a:g}–{b:g}" if b < 1e6 else f"{a:g}+" for a, b in edges)
        + " |",
        "|---|" + "---|" * len(edges),
    ]
    for name, bins in r["worlds"].items():
        by = {(b["from"], b["to"]): b for b in bins}
        cells = [f"{_pct(by[e]['coverage'])} ({by[e]['days']})" if e in by else "—" for e in edges]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def real_table(r: dict | None) -> list[str]:
    """The real-logs block: coverage, users as the unit and rows as the unit, on MovieLens."""
    if not r:
        return []
    w = r["world"]
    lines = [
        f"On real logs ({w['source']}, the quality benchmark's test weeks: {w['test_users']} "
        f"users): A/A with LightGBM and the item prior on exchangeable sides per user; a "
        f"planted loss (a random logit offset per user, sd {r['offset_sd']}) on half the users "
        "drawn without replacement, its truth measured on all of them (intervals narrowed by "
        "the finite-population factor for coverage).",
        "",
        "| case | rows/day | users | true Δ | coverage, users as unit | coverage, rows as unit "
        "(DeLong) | se ratio | refused |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, label in (("equal", "equal (A/A)"), ("loss", "planted loss")):
        c = r[case]
        lines.append(
            f"| {label} | {c['rows_per_day']:,.0f} | {c['users_per_day']:,.0f} | "
            f"{c['true_delta']:+.4f} | {_pct(c['coverage_users'])} | {_pct(c['coverage_rows'])} | "
            f"{c['se_users'] / c['se_rows']:.2f}x | {_pct(c['refused'])} |"
        )
    g = r["guards"]
    by_check = ", ".join(f"{k} {n}" for k, n in sorted(g["findings_by_check"].items()))
    lines += [
        "",
        f"The data guards on its {g['days']} validation and test days ({g['rows_per_day']:,.0f} "
        f"rows a day on average), each against the training window: {g['days_flagged']} days "
        f"flagged; findings by check: {by_check or 'none'}.",
    ]
    return [*lines, ""]


def guard_table(g: dict) -> list[str]:
    """The data guards' block: false alarms on normal days and each breakage's finding."""
    w = g["world"]
    big = g["largest_on_normal_days"]
    lines = [
        f"Data guards on generated logs ({w['events_per_day']:,} events a day, {w['users']:,} "
        f"users, window {w['window_days']} + {w['history_days']} history days), each day "
        f"against the previous day's training window as a daily run checks it: **{g['false_alarms']} "
        f"false alarm(s) in {g['day_checks']} checks of normal days** ({g['runs']} daily runs). "
        f"Largest values on them: volume "
        f"{big.get('volume', math.nan):.2f}x, click rate {big.get('click_rate', math.nan):.2f}x, "
        f"new users {big.get('new_users', math.nan):+.3f}, new items "
        f"{big.get('new_items', math.nan):+.3f}, replayed {big.get('replayed', math.nan):.1%}, "
        f"feature shift {big.get('shift', math.nan):.2f} sd, id JS {big.get('js', math.nan):.3f}.",
        "",
        "| breakage injected into the newest day | blocked | the expected check | findings |",
        "|---|---|---|---|",
    ]
    for b in g["breakages"]:
        found = "; ".join(f.split(": ", 1)[1] for f in b["findings"]) or "none"
        lines.append(
            f"| {b['breakage']} | {'yes' if b['blocked'] else '**no**'} | "
            f"{'named' if b['expected_check_named'] else '**not named**'} | {found} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    return quick_main(
        NAME, __doc__, "fewer simulated days: a smoke test", measure, readme_table, argv
    )


if __name__ == "__main__":
    sys.exit(main())
