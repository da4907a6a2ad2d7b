"""The data guards' measures on hand-made inputs: distances, divergences, shares, replays."""

from __future__ import annotations

import math

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
    assert math.isinf(g.shift(g._levels(np.zeros(10)), 0.0, np.ones(5)))


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
