"""The data guards' measures on hand-made inputs: distances, divergences, shares, replays."""

from __future__ import annotations

import numpy as np
import pytest

from components.evaluate import guards as g


def test_jensen_shannon_is_zero_for_the_same_mass_and_one_for_disjoint_mass():
    assert g.js_divergence([0.2, 0.3, 0.5], [2, 3, 5]) == pytest.approx(0.0, abs=1e-12)
    assert g.js_divergence([1, 0], [0, 1]) == pytest.approx(1.0)
    half = g.js_divergence([1, 0], [0.5, 0.5])
    assert 0 < half < 1 and half == pytest.approx(g.js_divergence([0.5, 0.5], [1, 0]))


def test_shift_is_the_wasserstein_distance_in_standard_deviations():
    rng = np.random.default_rng(0)
    base = rng.normal(0, 2, 200_000)
    levels = g._levels(base)
    assert g.shift(levels, 2.0, rng.normal(0, 2, 50_000)) < 0.05
    # moving every value by one standard deviation moves the distribution by exactly one
    assert g.shift(levels, 2.0, base + 2.0) == pytest.approx(1.0, abs=1e-9)
    # a point mass moving a little moves the distance only a little
    mass = np.r_[np.full(9000, -2.45), rng.normal(0, 1, 1000)]
    spread = float(mass.std())
    assert g.shift(g._levels(mass), spread, mass + 0.011) == pytest.approx(0.011 / spread)
    assert g.shift(g._levels(np.zeros(10)), 0.0, np.zeros(5)) == 0.0
    # a (near-)constant feature is measured in SCALE_FLOOR units, not its tiny spread: the prior's
    # logit moving by hundredths is no drift, a jump of a whole unit is
    assert g.shift(g._levels(np.zeros(10)), 0.0, np.ones(5)) == pytest.approx(1 / g.SCALE_FLOOR)
    assert g.shift(g._levels(np.full(10, 0.2)), 0.02, np.full(5, 0.25)) == pytest.approx(
        0.05 / g.SCALE_FLOOR
    )


def test_chance_levels_shrink_with_the_size_of_the_day():
    rng = np.random.default_rng
    mass = np.r_[np.full(1000, 0.9 / 1000), 0.1]
    small, large = (g.chance_js(mass, n, rng(1)) for n in (300, 300_000))
    # 300 rows cannot fill a thousand ids' mass: most of the divergence is chance
    assert small > 0.3 and large < 0.01
    # and a day drawn from the mass itself stays within its chance level, mostly
    draws = rng(2).multinomial(300, mass / mass.sum(), size=200)
    within = np.mean([g.js_divergence(mass, d) <= small for d in draws])
    assert 0.9 <= within <= 0.99
    levels = g._levels(rng(3).normal(0, 1, 100_000))
    few, many = (g.chance_shift(levels, 1.0, n, rng(4)) for n in (10, 1_000_000))
    assert few > 0.2 and many < 0.01
    # a sample of ten from the reference itself stays within the level about 95% of the time
    within = np.mean([g.shift(levels, 1.0, rng(5 + i).normal(0, 1, 10)) <= few for i in range(300)])
    assert 0.9 <= within <= 0.99


def test_a_day_is_judged_beyond_chance():
    check = g.DayCheck(
        "2026-01-02",
        300,
        {"js:item": 0.45, "shift:user_click_logit": 1.9},
        {"js:item": 0.3, "shift:user_click_logit": 0.3},
    )
    assert check.beyond_chance("js:item") == pytest.approx(0.15)
    assert g.findings(check, g.GuardRule()) == [
        "2026-01-02: feature user_click_logit moved 1.60 standard deviations beyond chance, over "
        "max_feature_shift 1.5"
    ]


def test_new_share_counts_rows_of_ids_first_seen_that_day():
    ids = np.array([1, 1, 2, 2, 3, 1, 4, 4])
    days = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    # day 1: id 3 is new (1 of 3 rows); day 2: id 4 is new (2 of 2 rows); day 0 left out
    assert g._new_share(ids, days) == pytest.approx((1 / 3 + 1) / 2)
    assert g._new_share(ids, np.zeros(8, dtype=np.int64)) == 0.0


def test_bitmaps_remember_the_residues_they_saw():
    seen = g._unbitmap(g._bitmap(np.array([5, 7, g.BITS + 9], dtype=np.int64)))
    assert len(seen) == g.BITS and seen.sum() == 3
    assert seen[[5, 7, 9]].all() and not seen[[6, 8]].any()


def test_replayed_rows_repeat_user_item_label_and_second_of_an_earlier_day():
    day = 86_400
    c = {
        "user_key": np.array([1, 2, 1, 2, 1]),
        "target_item": np.array([10, 20, 10, 20, 10]),
        "label": np.array([0, 1, 0, 0, 0]),
        "ts": np.array([100, 200, day + 100, day + 200, day + 101]),
    }
    # row 2 repeats row 0 a day later; row 3 changed its label; row 4 its second
    assert g.replayed(c).tolist() == [False, False, True, False, False]
