"""Evaluate-stage metrics against scikit-learn and brute-force reference computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import log_loss, roc_auc_score, roc_curve

from components.common.metrics import roc_auc
from components.evaluate.metrics import (
    calibration,
    clustered_auc,
    clustered_delong,
    delong,
    detectable_effect,
    gauc,
    logloss,
    paired_gauc,
    roc_points,
    summarize,
)

# ---------------------------------------------------------------------------- logloss


def test_logloss_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    prob = rng.uniform(0.01, 0.99, 1000)
    labels = rng.integers(0, 2, 1000)
    assert logloss(prob, labels) == pytest.approx(log_loss(labels, prob), rel=1e-12)


def test_logloss_clips_extremes() -> None:
    value = logloss(np.array([0.0, 1.0]), np.array([1, 0]))
    assert math.isfinite(value)
    assert value == pytest.approx(-math.log(1e-7), rel=1e-6)


# ---------------------------------------------------------------------------- gauc


def _gauc_loop(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> float:
    total = weight = 0.0
    for user in np.unique(groups):
        mask = groups == user
        if labels[mask].min() == labels[mask].max():
            continue
        total += mask.sum() * roc_auc_score(labels[mask], scores[mask])
        weight += mask.sum()
    return total / weight if weight else math.nan


def test_gauc_matches_per_user_loop_with_ties_and_negative_keys() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    groups = rng.integers(-40, 40, n).astype(np.int64) * 1_000_003  # big and negative keys
    scores = np.round(rng.uniform(0, 1, n), 1)  # many ties inside each user
    labels = (rng.uniform(0, 1, n) < 0.2 + 0.5 * scores).astype(np.float32)
    # A few single-class users that must be excluded.
    groups = np.r_[groups, [7, 7, 7, -9, -9]]
    scores = np.r_[scores, [0.1, 0.5, 0.9, 0.3, 0.3]]
    labels = np.r_[labels, [1, 1, 1, 0, 0]]
    result = gauc(scores, labels, groups)
    assert result["gauc"] == pytest.approx(_gauc_loop(scores, labels, groups), rel=1e-12)
    assert result["groups"] == len(np.unique(groups))
    assert result["groups_counted"] == result["groups"] - 2
    assert result["rows_counted"] == len(scores) - 5


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-3, 3), st.integers(0, 4), st.integers(0, 1)),
        min_size=1,
        max_size=40,
    )
)
def test_gauc_property_matches_loop(rows: list[tuple[int, int, int]]) -> None:
    groups, scores, labels = (np.array(col) for col in zip(*rows, strict=True))
    result = gauc(scores.astype(np.float64), labels, groups)
    expected = _gauc_loop(scores, labels, groups)
    if math.isnan(expected):
        assert math.isnan(result["gauc"])
        assert result["groups_counted"] == 0
    else:
        assert result["gauc"] == pytest.approx(expected, rel=1e-12)


def test_gauc_hand_computed() -> None:
    # User 1: 2 rows, perfectly ranked (AUC 1). User 2: 4 rows, AUC 0.5.
    groups = np.array([1, 1, 2, 2, 2, 2])
    scores = np.array([0.9, 0.1, 0.8, 0.2, 0.7, 0.3])
    labels = np.array([1, 0, 1, 1, 0, 0])
    # User 2 pairs (pos vs neg): .8>.7, .8>.3, .2<.7, .2<.3 -> 2/4 = 0.5.
    result = gauc(scores, labels, groups)
    assert result["gauc"] == pytest.approx((2 * 1.0 + 4 * 0.5) / 6)
    assert (result["groups"], result["groups_counted"], result["rows_counted"]) == (2, 2, 6)


def test_gauc_nan_without_qualifying_user() -> None:
    result = gauc(np.array([0.1, 0.2, 0.3]), np.array([1, 1, 0]), np.array([1, 1, 2]))
    assert math.isnan(result["gauc"])
    assert (result["groups"], result["groups_counted"], result["rows_counted"]) == (2, 0, 0)
    empty = gauc(np.array([]), np.array([]), np.array([], dtype=np.int64))
    assert math.isnan(empty.pop("gauc"))
    assert empty == {"groups": 0, "groups_counted": 0, "rows_counted": 0}


# ---------------------------------------------------------------------------- calibration


def test_calibration_small_for_calibrated_predictions() -> None:
    rng = np.random.default_rng(2)
    prob = rng.beta(1, 20, 200_000)  # CTR-like: clustered at low values
    labels = (rng.uniform(0, 1, len(prob)) < prob).astype(np.int8)
    result = calibration(prob, labels, bins=20)
    assert result["ece"] < 0.005
    assert len(result["bins"]) == 20
    assert sum(b["count"] for b in result["bins"]) == len(prob)
    assert all(b["count"] > 0 for b in result["bins"])


def test_calibration_hand_computed_two_bins() -> None:
    prob = np.array([0.4, 0.1, 0.3, 0.2])  # sorted: .1 .2 | .3 .4
    labels = np.array([1, 0, 0, 1])  # labels in sorted order: 0 1 | 0 1
    result = calibration(prob, labels, bins=2)
    low, high = result["bins"]
    assert low == {"mean_prediction": pytest.approx(0.15), "positive_rate": 0.5, "count": 2}
    assert high == {"mean_prediction": pytest.approx(0.35), "positive_rate": 0.5, "count": 2}
    assert result["ece"] == pytest.approx(0.5 * 0.35 + 0.5 * 0.15)
    assert result["mean_prediction"] == pytest.approx(0.25)
    assert result["positive_rate"] == 0.5


def test_calibration_fewer_rows_than_bins_and_empty() -> None:
    result = calibration(np.array([0.2, 0.7, 0.1]), np.array([0, 1, 0]), bins=20)
    assert [b["count"] for b in result["bins"]] == [1, 1, 1]
    result = calibration(np.arange(23) / 23, np.zeros(23), bins=5)
    counts = [b["count"] for b in result["bins"]]
    assert sum(counts) == 23 and min(counts) >= 4 and max(counts) <= 5
    empty = calibration(np.array([]), np.array([]))
    assert math.isnan(empty["ece"]) and empty["bins"] == []


# ---------------------------------------------------------------------------- roc_points


def test_roc_points_match_sklearn_without_thinning() -> None:
    rng = np.random.default_rng(3)
    scores = np.round(rng.uniform(0, 1, 500), 2)
    labels = (rng.uniform(0, 1, 500) < scores).astype(int)
    fpr, tpr, thresholds = roc_curve(labels, scores, drop_intermediate=False)
    points = roc_points(scores, labels, max_points=10_000)
    assert len(points) == len(fpr)
    np.testing.assert_allclose([p["fpr"] for p in points], fpr, rtol=0, atol=1e-12)
    np.testing.assert_allclose([p["tpr"] for p in points], tpr, rtol=0, atol=1e-12)
    assert points[0]["threshold"] == float("inf") == thresholds[0]
    np.testing.assert_array_equal([p["threshold"] for p in points[1:]], thresholds[1:])


def test_roc_points_thinning_keeps_ends_and_order() -> None:
    rng = np.random.default_rng(4)
    scores = rng.uniform(0, 1, 2000)
    labels = rng.integers(0, 2, 2000)
    full = roc_points(scores, labels, max_points=100_000)
    thin = roc_points(scores, labels, max_points=50)
    assert len(thin) == 50
    assert thin[0] == full[0] and thin[-1] == full[-1]
    assert thin[-1]["fpr"] == thin[-1]["tpr"] == 1.0
    thresholds = [p["threshold"] for p in thin]
    assert all(a > b for a, b in zip(thresholds, thresholds[1:], strict=False))
    for key in ("fpr", "tpr"):
        values = [p[key] for p in thin]
        assert all(a <= b for a, b in zip(values, values[1:], strict=False))


def test_roc_points_needs_both_classes() -> None:
    with pytest.raises(ValueError, match="roc_points needs both positive and negative labels"):
        roc_points(np.array([0.1, 0.2]), np.array([1, 1]))


# ---------------------------------------------------------------------------- delong


def _brute_force_delong_var(a: np.ndarray, b: np.ndarray, labels: np.ndarray) -> float:
    """DeLong's variance of AUC_a - AUC_b straight from the pairwise psi table."""
    y = labels.astype(bool)

    def components(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x, z = s[y][:, None], s[~y][None, :]
        psi = (x > z) + 0.5 * (x == z)
        return psi.mean(axis=1), psi.mean(axis=0)

    v10_a, v01_a = components(a)
    v10_b, v01_b = components(b)
    s10 = np.cov(np.vstack([v10_a, v10_b]))
    s01 = np.cov(np.vstack([v01_a, v01_b]))
    contrast = np.array([1.0, -1.0])
    return float(contrast @ s10 @ contrast / y.sum() + contrast @ s01 @ contrast / (~y).sum())


def test_delong_matches_sklearn_and_brute_force_with_ties() -> None:
    rng = np.random.default_rng(5)
    n = 300
    labels = rng.integers(0, 2, n)
    a = np.round(labels * 0.3 + rng.uniform(0, 1, n), 1)
    b = np.round(labels * 0.1 + 0.5 * a + rng.uniform(0, 1, n), 1)
    result = delong(a, b, labels)
    assert result["auc_a"] == pytest.approx(roc_auc_score(labels, a), rel=1e-12)
    assert result["auc_b"] == pytest.approx(roc_auc_score(labels, b), rel=1e-12)
    assert result["delta"] == pytest.approx(result["auc_a"] - result["auc_b"])
    assert result["se"] ** 2 == pytest.approx(_brute_force_delong_var(a, b, labels), rel=1e-10)
    assert result["positives"] + result["negatives"] == n
    assert result["ci_low"] < result["delta"] < result["ci_high"]
    assert result["z"] == pytest.approx(result["delta"] / result["se"])
    assert result["p_value"] == pytest.approx(
        math.erfc(abs(result["z"]) / math.sqrt(2)), rel=1e-12
    )  # two-sided


def test_delong_identical_scores() -> None:
    rng = np.random.default_rng(6)
    scores = rng.uniform(0, 1, 200)
    labels = rng.integers(0, 2, 200)
    result = delong(scores, scores.copy(), labels)
    assert result["delta"] == 0.0 and result["se"] == 0.0
    assert result["z"] == 0.0 and result["p_value"] == 1.0
    assert result["ci_low"] == result["ci_high"] == 0.0


def test_delong_detects_clearly_better_model_and_ci_shrinks() -> None:
    rng = np.random.default_rng(7)

    def sample(n: int) -> dict:
        labels = rng.integers(0, 2, n)
        noise = rng.normal(0, 1, n)
        good = labels * 1.5 + noise
        weak = labels * 0.5 + noise + rng.normal(0, 1, n)
        return delong(good, weak, labels)

    small, large = sample(500), sample(5000)
    assert large["ci_low"] > 0 and large["p_value"] < 1e-6
    assert large["ci_high"] - large["ci_low"] < small["ci_high"] - small["ci_low"]


def test_delong_confidence_controls_width() -> None:
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 2, 400)
    a, b = labels + rng.normal(0, 1, 400), labels + rng.normal(0, 1, 400)
    r95, r99 = delong(a, b, labels), delong(a, b, labels, confidence=0.99)
    assert r99["ci_high"] - r99["ci_low"] > r95["ci_high"] - r95["ci_low"]
    assert r99["p_value"] == r95["p_value"]


def test_delong_errors() -> None:
    scores = np.array([0.1, 0.4, 0.3])
    with pytest.raises(ValueError, match="^delong needs both positive and negative labels$"):
        delong(scores, scores, np.array([1, 1, 1]))
    with pytest.raises(ValueError, match="^delong needs both positive and negative labels$"):
        delong(scores, scores, np.array([0, 0, 0]))
    with pytest.raises(ValueError, match=r"arrays differ in length: \[3, 2, 3\]"):
        delong(scores, scores[:2], np.array([0, 1, 0]))
    with pytest.raises(ValueError, match=r"expected 1-D arrays, got shape \(1, 3\)"):
        delong(scores[None, :], scores, np.array([0, 1, 0]))
    for bad in (1.0, 0.0, -0.5):
        with pytest.raises(ValueError, match=rf"confidence must be in \(0, 1\), got {bad}"):
            delong(scores, scores, np.array([0, 1, 0]), confidence=bad)


# Hand-computed (DeLong et al. 1988, eqs. for V10/V01 and S10/S01), 3 positives and 2 negatives:
#   A: positives 0.9 0.8 0.4 | negatives 0.5 0.3 -> V10 = (1, 1, 1/2), V01 = (2/3, 1), AUC 5/6
#   B: positives 0.6 0.2 0.7 | negatives 0.4 0.65 -> V10 = (1/2, 0, 1), V01 = (2/3, 1/3), AUC 1/2
#   S10: var A 1/12, var B 1/4, cov -1/8 -> (1/12 + 1/4 + 1/4) / 3 = 7/36
#   S01: var A 1/18, var B 1/18, cov -1/18 -> (4/18) / 2 = 1/9
#   var(delta) = 11/36, se = sqrt(11)/6, delta = 1/3, z = 2/sqrt(11)
HAND_A = np.array([0.9, 0.8, 0.4, 0.5, 0.3])
HAND_B = np.array([0.6, 0.2, 0.7, 0.4, 0.65])
HAND_LABELS = np.array([1, 1, 1, 0, 0])
Z_975 = 1.959963984540054
"""The 97.5% standard normal quantile (tables: 1.95996...), the half-width of a 95% interval in se."""


def test_delong_matches_a_hand_computed_example() -> None:
    result = delong(HAND_A, HAND_B, HAND_LABELS)
    assert result["auc_a"] == pytest.approx(5 / 6, abs=1e-15)
    assert result["auc_b"] == pytest.approx(0.5, abs=1e-15)
    assert result["delta"] == pytest.approx(1 / 3, abs=1e-15)
    assert result["se"] == pytest.approx(math.sqrt(11) / 6, rel=1e-12)
    assert result["z"] == pytest.approx(2 / math.sqrt(11), rel=1e-12)
    # two-sided p of z = 0.603023: 2 * (1 - Phi(0.603023)) = 0.546494 (normal tables)
    assert result["p_value"] == pytest.approx(0.5464936, abs=1e-6)
    assert result["ci_low"] == pytest.approx(1 / 3 - Z_975 * math.sqrt(11) / 6, rel=1e-12)
    assert result["ci_high"] == pytest.approx(1 / 3 + Z_975 * math.sqrt(11) / 6, rel=1e-12)
    assert (result["positives"], result["negatives"], result["confidence"]) == (3, 2, 0.95)
    # the same rows in another order, and the models swapped, give the same (mirrored) answer
    order = np.array([4, 0, 3, 2, 1])
    assert delong(HAND_A[order], HAND_B[order], HAND_LABELS[order]) == pytest.approx(result)
    swapped = delong(HAND_B, HAND_A, HAND_LABELS)
    assert swapped["delta"] == pytest.approx(-1 / 3) and swapped["se"] == pytest.approx(
        result["se"]
    )
    assert swapped["z"] == pytest.approx(-result["z"]) and swapped["p_value"] == pytest.approx(
        result["p_value"]
    )


@pytest.mark.parametrize(
    "confidence, z", [(0.95, Z_975), (0.90, 1.6448536269514722), (0.99, 2.5758293035489004)]
)
def test_delong_interval_is_delta_plus_minus_z_times_se(confidence: float, z: float) -> None:
    """Width = 2 * z(1 - alpha/2) * se: a 95% interval that quietly became a 90% one fails here."""
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 2, 400)
    a, b = labels + rng.normal(0, 1, 400), labels + rng.normal(0, 1, 400)
    result = delong(a, b, labels, confidence=confidence)
    assert result["se"] > 0
    assert result["ci_high"] - result["ci_low"] == pytest.approx(2 * z * result["se"], rel=1e-12)
    assert (result["ci_low"] + result["ci_high"]) / 2 == pytest.approx(result["delta"], rel=1e-12)
    assert result["p_value"] == pytest.approx(math.erfc(abs(result["z"]) / math.sqrt(2)), rel=1e-12)
    assert result["confidence"] == confidence


def test_delong_on_hanley_and_mcneil_published_ratings() -> None:
    """Hanley & McNeil (1982, Radiology 143:29, Table 1): 5-point CT ratings of 58 normal and 51
    abnormal cases; published area 0.893 and standard error 0.032. Against a constant scorer
    (AUC 0.5, zero variance) DeLong's se of the difference is the area's own se. The paper's 0.032
    uses its exponential approximation of Q1, Q2; DeLong's empirical estimate is within 0.002."""
    normal = np.repeat([1, 2, 3, 4, 5], [33, 6, 6, 11, 2])
    abnormal = np.repeat([1, 2, 3, 4, 5], [3, 2, 2, 11, 33])
    ratings = np.concatenate([abnormal, normal]).astype(float)
    labels = np.concatenate([np.ones(51, int), np.zeros(58, int)])
    result = delong(ratings, np.zeros_like(ratings), labels)
    assert (result["positives"], result["negatives"]) == (51, 58)
    assert round(result["auc_a"], 3) == 0.893 and result["auc_b"] == 0.5
    assert result["se"] == pytest.approx(0.032, abs=0.002)
    assert result["ci_high"] - result["ci_low"] == pytest.approx(
        2 * Z_975 * result["se"], rel=1e-12
    )


def test_delong_zero_variance_with_a_difference_is_certain() -> None:
    """Both models' components constant (A separates perfectly, B scores all alike): se is 0."""
    labels = np.array([1, 1, 0, 0, 0])
    perfect, flat = np.array([0.9, 0.8, 0.2, 0.1, 0.3]), np.full(5, 0.5)
    result = delong(perfect, flat, labels)
    assert (result["auc_a"], result["auc_b"], result["se"]) == (1.0, 0.5, 0.0)
    assert result["z"] == math.inf and result["p_value"] == 0.0
    assert result["ci_low"] == result["ci_high"] == 0.5
    reverse = delong(flat, perfect, labels)
    assert reverse["z"] == -math.inf and reverse["p_value"] == 0.0


def test_delong_integer_scores_and_boolean_labels() -> None:
    ints = delong(
        np.array([3, 2, 1, 2, 0]),
        np.array([1, 1, 1, 1, 1]),
        np.array([True, True, True, False, False]),
    )
    floats = delong(np.array([3.0, 2.0, 1.0, 2.0, 0.0]), np.ones(5), np.array([1, 1, 1, 0, 0]))
    assert ints == pytest.approx(floats)
    # per positive, the share of negatives (2, 0) beaten, ties half: 3 -> 1, 2 -> 3/4, 1 -> 1/2
    assert ints["auc_a"] == pytest.approx((1 + 0.75 + 0.5) / 3)


def test_delong_single_positive_gives_nan_interval() -> None:
    result = delong(np.array([0.9, 0.2, 0.3]), np.array([0.1, 0.2, 0.3]), np.array([1, 0, 0]))
    assert result["auc_a"] == 1.0 and result["auc_b"] == 0.0
    assert math.isnan(result["se"]) and math.isnan(result["p_value"])


# ---------------------------------------------------------------------------- users as the unit


def _clustered_world(seed: int, users: int = 150, rows_per_user: int = 20):
    """Rows grouped by user; each model misjudges each user by its own offset, so a user's
    rows err together -- the correlation an interval over rows ignores."""
    rng = np.random.default_rng(seed)
    user = np.repeat(np.arange(users), rows_per_user)
    taste = rng.normal(0, 1, users)[user]
    quality = rng.normal(0, 1, len(user))
    labels = rng.uniform(size=len(user)) < 1 / (1 + np.exp(-(taste + quality - 1.5)))
    a = taste + quality + rng.normal(0, 1.5, users)[user] + rng.normal(0, 0.3, len(user))
    b = taste + quality + rng.normal(0, 1.5, users)[user] + rng.normal(0, 0.3, len(user))
    return a, b, labels.astype(int), user


def _user_bootstrap_se(a, b, labels, user, draws: int = 400, seed: int = 0) -> float:
    """The reference: resample whole users with replacement, recompute the AUC difference."""
    rng = np.random.default_rng(seed)
    rows_of = [np.flatnonzero(user == u) for u in np.unique(user)]
    deltas = []
    for _ in range(draws):
        rows = np.concatenate([rows_of[i] for i in rng.integers(0, len(rows_of), len(rows_of))])
        deltas.append(roc_auc(a[rows], labels[rows]) - roc_auc(b[rows], labels[rows]))
    return float(np.std(deltas, ddof=1))


@pytest.mark.parametrize("seed", [1, 2])
def test_clustered_se_matches_a_user_block_bootstrap_and_exceeds_delong(seed: int) -> None:
    a, b, labels, user = _clustered_world(seed)
    result = clustered_delong(a, b, labels, user)
    reference = _user_bootstrap_se(a, b, labels, user)
    assert result["se"] == pytest.approx(reference, rel=0.15)
    # the rows of a user err together: the i.i.d. interval is far too narrow
    assert result["se"] > 1.3 * result["iid"]["se"]
    assert result["iid"]["se"] == pytest.approx(delong(a, b, labels)["se"], rel=1e-12)
    assert result["users"] == 150 and result["delta"] == delong(a, b, labels)["delta"]


def test_one_row_per_user_is_delong_again() -> None:
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 2, 3000)
    a = labels + rng.normal(0, 1, 3000)
    b = labels + rng.normal(0, 1.2, 3000)
    clustered, iid = clustered_delong(a, b, labels, np.arange(3000)), delong(a, b, labels)
    # the same variance up to the (U-1)/U and (M-1)/M small-sample factors
    assert clustered["se"] == pytest.approx(iid["se"], rel=2e-3)
    assert clustered["ci_high"] == pytest.approx(iid["ci_high"], rel=2e-2)


def test_clustered_comparison_ignores_row_order_and_user_names() -> None:
    a, b, labels, user = _clustered_world(3, users=40, rows_per_user=8)
    base = clustered_delong(a, b, labels, user)
    order = np.random.default_rng(0).permutation(len(a))
    renamed = (user * 7919 + 13)[order].astype(str)
    shuffled = clustered_delong(a[order], b[order], labels[order], renamed)
    assert {k: shuffled[k] for k in ("delta", "se", "users")} == pytest.approx(
        {k: base[k] for k in ("delta", "se", "users")}
    )
    swapped = clustered_delong(b, a, labels, user)
    assert swapped["delta"] == pytest.approx(-base["delta"]) and swapped["se"] == pytest.approx(
        base["se"]
    )
    assert base["ci_high"] - base["delta"] == pytest.approx(1.959964 * base["se"], rel=1e-6)
    # merging two users into one changes the unit, and with it the variance
    merged = clustered_delong(a, b, labels, np.minimum(user, 38))
    assert merged["users"] == 39 and merged["se"] != pytest.approx(base["se"], rel=1e-9)


def test_clustered_comparison_undefined_and_refused() -> None:
    a, b, labels, _ = _clustered_world(5, users=10, rows_per_user=5)
    one_user = clustered_delong(a, b, labels, np.zeros(len(a)))
    assert one_user["users"] == 1 and math.isnan(one_user["se"])
    assert math.isnan(one_user["ci_high"]) and math.isnan(one_user["p_value"])
    single_click = np.zeros(len(a), dtype=int)
    single_click[3] = 1
    assert math.isnan(clustered_delong(a, b, single_click, np.arange(len(a)))["se"])
    with pytest.raises(ValueError, match="^clustered_delong needs both positive and negative"):
        clustered_delong(a, b, np.ones(len(a)), np.arange(len(a)))
    with pytest.raises(ValueError, match="differ in length"):
        clustered_delong(a, b, labels, np.arange(3))
    with pytest.raises(ValueError, match="NaN or infinite"):
        clustered_delong(np.r_[np.nan, a[1:]], b, labels, np.arange(len(a)))


def test_clustered_auc_of_one_model_matches_a_user_block_bootstrap() -> None:
    a, _, labels, user = _clustered_world(6)
    result = clustered_auc(a, labels, user)
    assert result["auc"] == roc_auc(a, labels)
    reference = _user_bootstrap_se(a, np.zeros(len(a)), labels, user)
    assert result["se"] == pytest.approx(reference, rel=0.15)
    assert result["ci_low"] < result["auc"] < result["ci_high"]
    assert result["ci_high"] - result["auc"] == pytest.approx(1.959964 * result["se"], rel=1e-6)
    assert result["se"] > 1.3 * result["iid"]["se"] and result["users"] == 150
    assert result["iid"]["ci_low"] > result["ci_low"]


def _skill_world(rng, users: int, edge: float = 1.0):
    """Rows grouped by user (5 to 40 each); each model ranks each user's items with its own
    noise, so one model is better for some users and worse for others -- the per-user AUC
    differences a GAUC comparison must average. ``edge`` < 1 makes model a less noisy."""
    rows = rng.integers(5, 41, users)
    user = np.repeat(np.arange(users), rows)
    quality = rng.normal(0, 1, len(user))
    labels = (rng.uniform(size=len(user)) < 1 / (1 + np.exp(-(quality - 0.5)))).astype(int)
    noise_a = edge * rng.lognormal(0, 0.6, users)[user]
    noise_b = rng.lognormal(0, 0.6, users)[user]
    a = quality + noise_a * rng.normal(0, 1, len(user))
    b = quality + noise_b * rng.normal(0, 1, len(user))
    return a, b, labels, user


def test_paired_gauc_is_the_difference_of_the_two_gaucs() -> None:
    a, b, labels, user = _skill_world(np.random.default_rng(0), 60)
    result = paired_gauc(a, b, labels, user)
    assert result["delta"] == pytest.approx(
        gauc(a, labels, user)["gauc"] - gauc(b, labels, user)["gauc"], abs=1e-12
    )
    assert result["users"] == gauc(a, labels, user)["groups_counted"]
    assert result["ci_high"] - result["delta"] == pytest.approx(1.959964 * result["se"], rel=1e-6)
    swapped = paired_gauc(b, a, labels, user)
    assert swapped["delta"] == pytest.approx(-result["delta"]) and swapped["se"] == pytest.approx(
        result["se"]
    )
    assert paired_gauc(a, a, labels, user)["se"] == 0.0
    one_user = paired_gauc(a, b, labels, np.zeros(len(a)))
    assert one_user["users"] == 1 and math.isnan(one_user["se"]) and math.isnan(one_user["ci_low"])


def test_paired_gauc_hand_computed() -> None:
    # user 0 (4 rows): AUC 1 vs 0.25; user 1 (2 rows): 0 vs 1; user 2 (2 rows): 1 vs 1
    labels = np.array([1, 0, 1, 0, 1, 0, 0, 1])
    user = np.array([0, 0, 0, 0, 1, 1, 2, 2])
    a = np.array([0.9, 0.1, 0.8, 0.2, 0.3, 0.4, 0.1, 0.2])
    b = np.array([0.1, 0.9, 0.8, 0.2, 0.5, 0.4, 0.1, 0.2])
    result = paired_gauc(a, b, labels, user, confidence=0.9)
    # delta = (4 * 0.75 + 2 * -1 + 2 * 0) / 8; residuals w (d - delta) = 2.5, -2.25, -0.25
    assert result["delta"] == pytest.approx(0.125)
    assert result["se"] == pytest.approx(math.sqrt(3 / 2 * (2.5**2 + 2.25**2 + 0.25**2)) / 8)
    assert result["users"] == 3 and result["confidence"] == 0.9
    assert result["ci_high"] - result["delta"] == pytest.approx(1.644854 * result["se"], rel=1e-6)
    # two users are enough for a spread
    two = paired_gauc(a[:6], b[:6], labels[:6], user[:6])
    assert two["users"] == 2 and two["delta"] == pytest.approx((4 * 0.75 - 2) / 6)
    residuals = np.array([4 * (0.75 - two["delta"]), 2 * (-1 - two["delta"])])
    assert two["se"] == pytest.approx(math.sqrt(2 * np.sum(residuals**2)) / 6)


def test_paired_gauc_se_matches_a_user_block_bootstrap() -> None:
    # with a real difference: a residual not centred on it would inflate the variance
    a, b, labels, user = _skill_world(np.random.default_rng(1), 200, edge=0.5)
    rng = np.random.default_rng(2)
    rows_of = [np.flatnonzero(user == u) for u in range(200)]
    deltas = []
    for _ in range(300):
        picked = rng.integers(0, 200, 200)
        rows = np.concatenate([rows_of[i] for i in picked])
        # each draw of a user is a user of its own
        relabel = np.repeat(np.arange(200), [len(rows_of[i]) for i in picked])
        deltas.append(
            gauc(a[rows], labels[rows], relabel)["gauc"]
            - gauc(b[rows], labels[rows], relabel)["gauc"]
        )
    assert paired_gauc(a, b, labels, user)["se"] == pytest.approx(np.std(deltas, ddof=1), rel=0.15)


@pytest.mark.parametrize("edge", [1.0, 0.6])
def test_paired_gauc_interval_covers_the_truth_95_percent_of_the_time(edge: float) -> None:
    # equal models (edge 1: the truth is 0 by symmetry) and a better one (the truth measured on
    # 50,000 users); 400 days of 150 users each
    rng = np.random.default_rng(7)
    truth = 0.0 if edge == 1.0 else paired_gauc(*_skill_world(rng, 50_000, edge))["delta"]
    covered = 0
    for _ in range(400):
        r = paired_gauc(*_skill_world(rng, 150, edge))
        covered += r["ci_low"] <= truth <= r["ci_high"]
    assert 0.92 <= covered / 400 <= 0.98, covered / 400
    if edge != 1.0:
        assert truth > 0.02  # a real difference, not a second A/A


def test_detectable_effect_formula() -> None:
    # tolerance + (z_0.975 + z_0.8) * se
    assert detectable_effect(0.01, 0.0) == pytest.approx(0.028016, abs=1e-6)
    assert detectable_effect(0.0093, 0.0) == pytest.approx(0.026, abs=5e-4)
    assert detectable_effect(0.01, 0.002, power=0.5) == pytest.approx(0.002 + 0.0195996, abs=1e-6)
    assert detectable_effect(0.01, 0.0, confidence=0.9) == pytest.approx(0.024865, abs=1e-6)
    with pytest.raises(ValueError, match="power"):
        detectable_effect(0.01, 0.0, power=1.0)


# ---------------------------------------------------------------------------- summarize


def test_summarize_is_consistent() -> None:
    rng = np.random.default_rng(9)
    prob = rng.uniform(0.01, 0.5, 400)
    labels = (rng.uniform(0, 1, 400) < prob).astype(int)
    groups = rng.integers(0, 30, 400)
    result = summarize(prob, labels, groups, bins=10)
    assert set(result) == {
        "auc",
        "gauc",
        "logloss",
        "ece",
        "mean_prediction",
        "positive_rate",
        "rows",
        "users",
        "users_counted_gauc",
    }
    assert result["auc"] == roc_auc(prob, labels)
    assert result["gauc"] == gauc(prob, labels, groups)["gauc"]
    assert result["logloss"] == logloss(prob, labels)
    assert result["ece"] == calibration(prob, labels, bins=10)["ece"]
    assert result["rows"] == 400
    assert result["users"] == len(np.unique(groups))
    assert result["users_counted_gauc"] <= result["users"]
    assert result["positive_rate"] == pytest.approx(labels.mean())


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_no_metric_of_non_finite_scores(bad):
    """NaN has no rank: an AUC of NaN scores would depend on row order (and pass a gate)."""
    from components.common.metrics import roc_auc

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)
    scores = rng.random(200)
    scores[[17, 90]] = bad
    good = rng.random(200)
    message = r"2 of 200 scores are NaN or infinite \(first at row 17\)"
    for call in (
        lambda: roc_auc(scores, labels),
        lambda: delong(scores, good, labels),
        lambda: delong(good, scores, labels),
        lambda: gauc(scores, labels, rng.integers(0, 5, 200)),
        lambda: logloss(scores, labels),
        lambda: calibration(scores, labels),
    ):
        with pytest.raises(ValueError, match=message):
            call()
