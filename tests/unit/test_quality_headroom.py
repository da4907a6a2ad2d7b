"""The quality benchmark's headroom: what the logs still hold beyond a model's score (the users'
and items' offsets their earlier rows reveal, and, on synthetic logs, every effect but the hidden
ones), and the GAUC comparison with each baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks import quality
from benchmarks.quality import (
    OFFSET_PRIOR_SD,
    blind_offsets,
    earlier_offsets,
    known_effects,
    stacked_gain,
)
from components.common.dataset import DENSE_FEATURES
from components.datagen.hidden import HiddenEffects
from components.evaluate.metrics import paired_gauc


def _brute_force(keys, ts, residual, weight, prior_sd=OFFSET_PRIOR_SD):
    out = np.empty(len(keys))
    for i in range(len(keys)):
        earlier = (keys == keys[i]) & (ts < ts[i])
        out[i] = residual[earlier].sum() / (weight[earlier].sum() + 1 / prior_sd**2)
    return out


def _random_rows(seed: int, n: int = 300):
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 7, n)
    ts = rng.integers(0, 40, n)  # many rows share a time
    p = rng.uniform(0.02, 0.5, n)
    labels = (rng.random(n) < p).astype(float)
    return keys, ts, labels - p, p * (1 - p)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_offsets_equal_a_brute_force_over_strictly_earlier_rows(seed):
    keys, ts, residual, weight = _random_rows(seed)
    np.testing.assert_allclose(
        earlier_offsets(keys, ts, residual, weight), _brute_force(keys, ts, residual, weight)
    )


def test_a_row_never_sees_itself_a_row_of_its_time_or_a_later_one_and_does_see_earlier_ones():
    keys, ts, residual, weight = _random_rows(5)
    before = earlier_offsets(keys, ts, residual, weight)
    row = int(np.argmax((ts > 5) & (ts < 35)))
    same_or_later = (keys == keys[row]) & (ts >= ts[row])
    changed = residual.copy()
    changed[same_or_later] += 3.0
    np.testing.assert_array_equal(earlier_offsets(keys, ts, changed, weight)[row], before[row])
    earlier = np.flatnonzero((keys == keys[row]) & (ts < ts[row]))
    assert len(earlier)
    changed = residual.copy()
    changed[earlier[0]] += 3.0
    assert earlier_offsets(keys, ts, changed, weight)[row] != before[row]


def test_an_unseen_key_has_offset_zero_and_a_key_seen_often_reveals_its_effect():
    rng = np.random.default_rng(0)
    n = 40_000
    effect = 0.8
    base = rng.normal(-2.5, 0.5, n)
    p_true = 1 / (1 + np.exp(-(base + effect)))
    labels = (rng.random(n) < p_true).astype(float)
    p_blind = 1 / (1 + np.exp(-base))  # a model that does not know the key's effect
    offsets = earlier_offsets(np.zeros(n), np.arange(n), labels - p_blind, p_blind * (1 - p_blind))
    assert offsets[0] == 0
    # one Newton step from 0 at rare clicks: (p e^effect - p) / p = e^effect - 1, monotone in it
    assert offsets[-1] == pytest.approx(np.expm1(effect), rel=0.15)


def _planted(seed: int, n: int = 20_000, users: int = 300):
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, n)
    effect = rng.normal(0, 0.8, users)[user]
    base = rng.normal(-2.0, 1.0, n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-(base + effect)))).astype(int)
    return base, effect, labels, rng


def test_stacking_gains_what_the_score_lacks_and_nothing_it_already_has():
    base, effect, labels, rng = _planted(0)
    assert stacked_gain(base, [effect], labels) > 0.03
    assert abs(stacked_gain(base + effect, [effect], labels)) < 0.002
    assert abs(stacked_gain(base + effect, [rng.normal(size=len(labels))], labels)) < 0.002


def _splits(seed: int) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray]:
    """Three time-ordered splits of tabular-ready arrays with a planted per-user effect that the
    dataset's user count features reveal exactly (a model that sees them needs no offsets)."""
    rng = np.random.default_rng(seed)
    users, sizes = 80, {"train": 6000, "val": 1500, "test": 1500}
    effect = rng.normal(0, 1.0, users)
    splits, start = {}, 0
    for name, n in sizes.items():
        user = rng.integers(0, users, n)
        base = rng.normal(-2.0, 0.7, n)
        dense = np.zeros((n, len(DENSE_FEATURES)), np.float32)
        dense[:, DENSE_FEATURES.index("item_click_logit")] = base
        dense[:, DENSE_FEATURES.index("user_click_logit")] = effect[user]
        label = (rng.random(n) < 1 / (1 + np.exp(-(base + effect[user])))).astype(np.uint8)
        seq = np.zeros((n, 3), np.int32)
        splits[name] = {
            "hist_item": seq,
            "hist_cat": seq,
            "hist_gap": seq.astype(np.uint8),
            "hist_len": np.zeros(n, np.int16),
            "neg_item": seq,
            "neg_cat": seq,
            "target_item": rng.integers(1, 50, n).astype(np.int32),
            "target_cat": np.ones(n, np.int32),
            "context": np.zeros((n, 2), np.uint8),
            "dense": dense,
            "label": label,
            "user_key": user.astype(np.int64) * 7919,
            "ts": np.arange(start, start + n, dtype=np.int64),
        }
        start += n
    return splits, effect


def _logistic_fit(seen: list):
    from sklearn.linear_model import LogisticRegression

    def fit(train, val):
        seen.append(train[0].shape[1])
        return LogisticRegression(max_iter=1000).fit(*train)

    return fit


def test_blind_offsets_drop_the_entitys_features_and_recover_its_effect_on_test_rows(monkeypatch):
    splits, effect = _splits(0)
    seen: list[int] = []
    monkeypatch.setattr(quality, "lightgbm_model", _logistic_fit(seen))
    tables = {name: quality.tabular(a) for name, a in splits.items()}
    xy = {name: (tables[name][0], splits[name]["label"]) for name in splits}
    width = tables["train"][1]
    user_columns = [n for n in width if n.startswith(("user_", "history_length"))]
    offsets = blind_offsets(splits, xy, width, "user")
    assert seen == [len(width) - len(user_columns)]
    assert offsets.shape == (len(splits["test"]["label"]),)
    truth = effect[splits["test"]["user_key"] // 7919]
    assert np.corrcoef(offsets, truth)[0, 1] > 0.8
    # blind to items instead, the user features stay: no user offset is left to find
    seen.clear()
    item_offsets = blind_offsets(splits, xy, width, "item")
    assert seen == [len(width) - len([n for n in width if n.startswith("item_")])]
    assert abs(np.corrcoef(item_offsets, truth)[0, 1]) < 0.2


def test_known_effects_are_the_oracle_less_exactly_the_hidden_item_and_user_terms():
    truth = pd.DataFrame(
        {"p": [0.05, 0.2, 0.5], "item_id": [1, 3, 2], "user_id": [2, 1, 2]},
    )
    hidden = HiddenEffects(
        item_quality=np.array([0.5, -0.4, 0.9]), user_noise=np.array([0.2, -0.3])
    )
    dense = np.zeros((3, len(DENSE_FEATURES)), np.float32)
    p = truth["p"].to_numpy()
    expected = np.log(p / (1 - p)) - [0.5, 0.9, -0.4] - [-0.3, 0.2, -0.3]
    np.testing.assert_allclose(known_effects(truth, dense, hidden), expected)


def reported_world(**parts) -> dict:
    """One world's result as the benchmark stores it, with ``parts`` added."""
    models = {
        n: {"auc": 0.7, "gauc": 0.6, "logloss": 0.3} for n in (*quality.BASELINES, "dailyrec")
    }
    return {
        "world": {"name": "w"},
        "rows": {"train": 10},
        "models": models,
        "best_baseline": "lightgbm",
        "vs_best_baseline": {"delta": 0.001, "ci_low": -0.001, "ci_high": 0.003},
        "margin_met": False,
        **parts,
    }


def test_the_report_lists_each_models_headroom_and_na_without_an_oracle():
    world = reported_world(
        headroom={
            "dailyrec": {"offsets": 0.0004},
            "lightgbm": {
                "offsets": 0.0012,
                "known_effects": 0.0041,
                "known_user_level": 0.0035,
                "known_within_user": -0.0002,
            },
        }
    )
    text = quality.table([world], {"cpus": 2, "cpu_model": "x"})
    assert "| w | dailyrec | +0.0004 | n/a | n/a | n/a |" in text
    assert "| w | lightgbm | +0.0012 | +0.0041 | +0.0035 | -0.0002 |" in text


def test_headroom_splits_the_known_effects_into_a_level_per_user_and_the_rest(monkeypatch):
    """A score that has every within-user effect but no user levels gains from the levels only."""
    rng = np.random.default_rng(1)
    n, users = 20_000, 400
    user = rng.integers(0, users, n)
    level, within = rng.normal(0, 0.8, users)[user], rng.normal(-2.0, 1.0, n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-(level + within)))).astype(np.uint8)
    monkeypatch.setattr(quality, "blind_offsets", lambda *_: np.zeros(n))
    splits = {"test": {"label": labels, "user_key": user.astype(np.int64)}}
    score = 1 / (1 + np.exp(-within))
    gains = quality.headroom(splits, {}, [], {"m": score}, level + within)["m"]
    assert gains["known_user_level"] > 0.03 and gains["known_effects"] > 0.03
    assert abs(gains["known_within_user"]) < 0.002
    assert abs(gains["offsets"]) < 0.002


def test_the_report_compares_the_gauc_with_each_baseline_users_as_the_unit():
    rng = np.random.default_rng(3)
    users = np.repeat(np.arange(80), 12)
    labels = rng.integers(0, 2, len(users))
    scores = {
        n: labels + rng.normal(0, s, len(users))
        for n, s in zip(quality.BASELINES, (2, 3, 4), strict=True)
    }
    scores["dailyrec"] = labels + rng.normal(0, 1, len(users))
    world = reported_world(gauc_vs_baselines=quality.gauc_comparisons(scores, labels, users))
    text = quality.table([world], {"cpus": 2, "cpu_model": "x"})
    row = next(line for line in text.splitlines() if line.startswith("| w | 80 |"))
    for name in quality.BASELINES:
        r = paired_gauc(scores["dailyrec"], scores[name], labels, users)
        assert r["delta"] > 0  # the less noisy model ranks each user's rows better
        assert f"{r['delta']:+.4f} ({r['ci_low']:+.4f} .. {r['ci_high']:+.4f})" in row
