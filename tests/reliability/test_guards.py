"""Broken days never make a champion: each kind of logging breakage, injected into the newest day
of generated logs, is found by the data guards and named in one line; normal days pass."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import numpy as np
import pytest

from components.common.dataset_meta import DatasetMeta
from components.datagen import DatagenConfig, generate
from components.datagen.breakage import BREAKAGES, break_day, volume
from components.evaluate import guards as g
from components.evaluate.decision import GateRule, decide
from components.evaluate.report import guard_lines
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import preprocess

DAYS = 12
LAST = dt.date(2026, 1, 1) + dt.timedelta(days=DAYS - 1)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("guards") / "raw"
    generate(
        DatagenConfig(
            out=root, days=DAYS, users=1500, items=1200, categories=40, events_per_day=4000, seed=11
        )
    )
    return root


def broken(raw: Path, tmp: Path, name: str, change) -> Path:
    """A copy of ``raw`` whose newest day went through ``change``."""
    out = tmp / name
    shutil.copytree(raw, out)
    break_day(out, LAST, change)
    return out


def dataset(raw: Path, out: Path, end: dt.date = LAST) -> tuple[Path, dict]:
    preprocess(PreprocessConfig(raw=str(raw), out=str(out), end_date=end, days=8, history_days=3))
    return out, DatasetMeta.read(out)


@pytest.mark.parametrize("kind", list(BREAKAGES))
def test_each_breakage_blocks_the_candidate_and_says_why(raw, tmp_path, kind, fault_report):
    change, named = BREAKAGES[kind]
    data, meta = dataset(broken(raw, tmp_path, "raw", change), tmp_path / "data")
    rows = g.WindowRows.read(data, meta)
    result = g.run_guards(rows, g.training_profile(rows), g.GuardRule())
    assert result["blocked"], result["days"]
    assert any(line.startswith(LAST.isoformat()) and named in line for line in result["findings"])
    # a candidate that clears every other rule is not blessed, and the reason names the check
    verdict = decide(0.8, {"status": "none"}, None, GateRule(), result)
    assert not verdict.blessed
    assert verdict.reasons[-1].startswith("data guards: not blessed, ")
    assert named in verdict.reasons[-1] and "\n" not in verdict.reasons[-1]
    table = "\n".join(guard_lines(result))
    assert "**blocked**" in table and f"- {result['findings'][0]}" in table
    assert f"| {LAST.isoformat()} *test* |" in table
    # report_only measures the same and blocks nothing
    relaxed = g.run_guards(rows, g.training_profile(rows), g.GuardRule(report_only=True))
    assert relaxed["findings"] == result["findings"] and not relaxed["blocked"]
    assert decide(0.8, {"status": "none"}, None, GateRule(), relaxed).blessed
    fault_report(
        "guards",
        f"the newest day broken: {kind}",
        f"the data guards block the candidate; the reason names the day and the {named} check "
        "with the measured value and the threshold",
    )


def test_the_champions_window_is_the_reference_and_only_new_days_are_checked(raw, tmp_path):
    """Yesterday's dataset trained the champion; today's days after its window are checked."""
    old, old_meta = dataset(raw, tmp_path / "old", LAST - dt.timedelta(1))
    champion = g.training_profile(g.WindowRows.read(old, old_meta))
    round_trip = g.WindowProfile.from_state(champion.state_dict())
    assert round_trip == champion
    data, meta = dataset(broken(raw, tmp_path, "raw", volume), tmp_path / "new")
    result = g.run_guards(g.WindowRows.read(data, meta), round_trip, g.GuardRule())
    checked = [d["day"] for d in result["days"]]
    after = dt.date.fromisoformat(champion.days[-1])
    # the test day first, then the other days the champion never saw
    assert checked == [LAST.isoformat()] + [
        (after + dt.timedelta(i)).isoformat() for i in range(1, (LAST - after).days)
    ]
    assert result["test_days"] == [LAST.isoformat()]
    assert result["blocked"] and all(
        line.startswith(LAST.isoformat()) for line in result["findings"]
    )
    assert result["reference"]["days"] == f"{champion.days[0]} .. {champion.days[-1]}"


def test_the_test_day_is_guarded_even_where_the_reference_covers_it(raw, tmp_path, fault_report):
    """A champion trained on a window that holds the test day (a later one: a backfill, a re-run
    of an earlier day) leaves no day "new"; the decision still rests on the test day."""
    from components.datagen.breakage import labels_lost

    data, meta = dataset(broken(raw, tmp_path, "raw", labels_lost), tmp_path / "data")
    rows = g.WindowRows.read(data, meta)
    days = tuple(d for s in ("train", "val", "test") for d in meta.split(s).day_list)
    covering = g.build_profile([rows.columns], days)
    assert covering.days[-1] == LAST.isoformat()
    result = g.run_guards(rows, covering, g.GuardRule())
    assert [d["day"] for d in result["days"]] == [LAST.isoformat()] == result["test_days"]
    assert result["blocked"] and result["findings"][0].startswith(f"{LAST.isoformat()}: click")
    fault_report(
        "guards",
        "the test day's clicks logged as non-clicks, the reference window covering the test day",
        "the test day is guarded first whatever the reference covers: blocked, the day named",
    )


def test_normal_days_raise_no_alarm(raw, tmp_path, fault_report):
    """Every day of a normal window checked against the days before it: no finding."""
    data, meta = dataset(raw, tmp_path / "normal")
    c = g.WindowRows.read(data, meta).columns
    days = g._days(c["ts"])
    alarms, checked = [], 0
    for day in np.unique(days)[3:]:
        before = np.flatnonzero((days < day) & (days >= day - 5))
        reference = g.build_profile([{k: a[before] for k, a in c.items()}], ("a",) * 5)
        today = np.flatnonzero(days == day)
        check = g.check_day(reference, str(day), {k: a[today] for k, a in c.items()})
        alarms += g.findings(check, g.GuardRule())
        checked += 1
    assert checked >= 4 and not alarms, alarms
    rows = g.WindowRows.read(data, meta)
    normal = g.run_guards(rows, g.training_profile(rows), g.GuardRule())
    assert not normal["findings"] and not normal["blocked"] and len(normal["days"]) == 2
    fault_report(
        "guards",
        "normal days, each against the days before it",
        "no finding: the guards stay silent",
    )


def test_profiles_refuse_what_they_cannot_read():
    with pytest.raises(g.ProfileError, match="profile version 7"):
        g.WindowProfile.from_state({"version": 7})
    with pytest.raises(g.ProfileError, match="fields missing"):
        g.WindowProfile.from_state({"version": g.PROFILE_VERSION, "days": []})
    with pytest.raises(g.ProfileError, match="expected a JSON object"):
        g.WindowProfile.from_state([1, 2])
    for field, value in (("max_feature_shift", 0), ("min_volume_ratio", 1.5), ("max_id_js", 1)):
        with pytest.raises(ValueError, match=field):
            g.GuardRule(**{field: value})
