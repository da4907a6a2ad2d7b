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
from components.evaluate.metrics import clustered_delong, delong, detectable_effect

NAME = "gate"
TOLERANCES = (0.0, 0.001, 0.002, 0.005)
"""Tolerances whose false-refusal rate and power are measured; the shipped one is GateRule's."""
POPULATION_USERS = 200_000
"""Users of the large draw that measures a planted loss's true size."""


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


def guards(quick: bool, seed: int = 21) -> dict:
    """False alarms of the data guards over normal days, and each breakage's detection."""
    import datetime as dt
    import shutil
    import tempfile
    from pathlib import Path

    from components.datagen import DatagenConfig, generate
    from components.datagen.breakage import BREAKAGES, break_day
    from components.evaluate.guards import GuardRule, WindowRows, run_guards, training_profile
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import preprocess
    from components.train.data import load_meta

    window, history = 11, 3  # the daily pipeline's defaults
    normal_days = 4 if quick else 24
    first = dt.date(2026, 1, 1)
    total = history + window + normal_days
    rule = GuardRule()
    with tempfile.TemporaryDirectory(prefix="bench-guards-") as tmp:
        root = Path(tmp)
        raw = root / "raw"
        generate(DatagenConfig(out=raw, days=total, seed=seed, **GUARD_WORLD))

        def dataset(source: Path, end: dt.date, name: str):
            out = root / name
            preprocess(
                PreprocessConfig(
                    raw=str(source), out=str(out), end_date=end, days=window, history_days=history
                )
            )
            return out, load_meta(out)

        last = first + dt.timedelta(days=total - 1)
        ends = [last - dt.timedelta(days=i) for i in range(normal_days, -1, -1)]
        profiles, alarms, checked, largest = {}, [], 0, {}
        for end in ends:
            data, meta = dataset(raw, end, f"d{end}")
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
        detected = []
        for name, (breakage, words) in BREAKAGES.items():
            copy = root / "broken"
            shutil.copytree(raw, copy)
            break_day(copy, last, breakage)
            data, meta = dataset(copy, last, "broken-data")
            result = run_guards(
                WindowRows.read(data, meta), profiles[last - dt.timedelta(days=1)], rule
            )
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
    return {
        "world": {**GUARD_WORLD, "window_days": window, "history_days": history},
        "runs": len(ends) - 1,
        "day_checks": checked,
        "false_alarms": len(alarms),
        "alarms": alarms,
        "largest_on_normal_days": largest,
        "breakages": detected,
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
        "speed": speed(1_000_000, 100_000) if quick else speed(10_000_000, 1_000_000),
        "guards": guards(quick),
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
        *guard_table(result["guards"]),
    ]
    return "\n".join(lines)


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
