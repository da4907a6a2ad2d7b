"""Evaluation metrics for the CTR model: log loss, GAUC, calibration, ROC points, the paired
AUC comparison the gate reads (users as the unit, DeLong's i.i.d. figures beside it) and the
paired GAUC comparison (users as the unit).

Pure numpy (no torch, no scikit-learn at runtime) so the evaluate stage stays light; AUC and
tie-aware ranks come from :mod:`components.common.metrics` so every stage agrees on them.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from components.common.metrics import average_ranks, finite_scores, roc_auc

MIN_EFFECTIVE_USERS = 25.0
"""Effective users (:func:`effective_users`) below which a users-as-unit interval is undefined:
under it the 95% interval held the true difference on fewer than 93% of simulated days in some
world of ``benchmarks/gate.py`` (``make bench-gate`` measures coverage by effective users;
``tests/reliability/test_gate_concentration.py`` checks this value by simulation)."""
FLAT_SHARE = 0.99
"""Share of a day's rows on one score at or above which a model's scores are near-constant."""
FLAT_LOGIT_SD = 1e-3
"""Standard deviation of the scores' logits below which they are near-constant: noise ranks."""

__all__ = [
    "calibration",
    "clustered_auc",
    "clustered_delong",
    "delong",
    "detectable_effect",
    "gauc",
    "logloss",
    "paired_gauc",
    "roc_points",
    "summarize",
]


def _vectors(*arrays: Any) -> list[np.ndarray]:
    """The inputs as arrays, checked 1-D and of one length so a mismatch fails loudly."""
    out = [np.asarray(a) for a in arrays]
    for a in out:
        if a.ndim != 1:
            raise ValueError(f"expected 1-D arrays, got shape {a.shape}")
    lengths = {len(a) for a in out}
    if len(lengths) > 1:
        raise ValueError(f"arrays differ in length: {[len(a) for a in out]}")
    return out


def logloss(prob: np.ndarray, labels: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy; clipping keeps one confident mistake from making it infinite."""
    prob, labels = _vectors(finite_scores(prob), labels)
    if len(prob) == 0:
        return math.nan
    p = np.clip(prob.astype(np.float64), eps, 1.0 - eps)
    y = labels.astype(np.float64)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def _user_aucs(
    scores: np.ndarray, labels: np.ndarray, groups: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(group keys, AUC, rows) of each group with both classes, and the number of groups.

    Vectorized: one lexsort by (group, score), tie-aware mid-ranks within each group, and
    per-group sums with ``np.bincount`` -- no Python loop per user."""
    n = len(scores)
    order = np.lexsort((scores, groups))
    g = groups[order]
    s = scores[order]
    y = labels[order].astype(bool)

    new_group = np.r_[True, g[1:] != g[:-1]]
    group_id = np.cumsum(new_group) - 1
    group_start = np.flatnonzero(new_group)
    n_groups = len(group_start)

    # Runs of equal score inside a group share the mean of their (within-group) ranks.
    new_run = new_group | np.r_[True, s[1:] != s[:-1]]
    run_start = np.flatnonzero(new_run)
    run_end = np.r_[run_start[1:], n]
    run_group_start = group_start[group_id[run_start]]
    run_rank = ((run_start - run_group_start) + (run_end - run_group_start) + 1) / 2.0
    ranks = np.repeat(run_rank, run_end - run_start)

    rows = np.bincount(group_id, minlength=n_groups).astype(np.float64)
    pos = np.bincount(group_id, weights=y.astype(np.float64), minlength=n_groups)
    neg = rows - pos
    rank_sum = np.bincount(group_id, weights=np.where(y, ranks, 0.0), minlength=n_groups)

    ok = (pos > 0) & (neg > 0)
    auc = (rank_sum[ok] - pos[ok] * (pos[ok] + 1) / 2.0) / (pos[ok] * neg[ok])
    return g[group_start][ok], auc, rows[ok], n_groups


def gauc(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> dict[str, Any]:
    """Group AUC (Zhou et al., DIN 2018): impression-weighted mean of per-user AUC.

    Global AUC also rewards ranking one user above another, which a feed never does; GAUC only
    compares items shown to the same user. Users with a single class have no AUC and are left
    out.
    """
    scores, labels, groups = _vectors(finite_scores(scores), labels, groups)
    if len(scores) == 0:
        return {"gauc": math.nan, "groups": 0, "groups_counted": 0, "rows_counted": 0}
    _, auc, weights, n_groups = _user_aucs(scores, labels, groups)
    if len(auc) == 0:
        return {"gauc": math.nan, "groups": n_groups, "groups_counted": 0, "rows_counted": 0}
    return {
        "gauc": float(np.sum(weights * auc) / np.sum(weights)),
        "groups": n_groups,
        "groups_counted": len(auc),
        "rows_counted": int(weights.sum()),
    }


def paired_gauc(
    scores_a: np.ndarray,
    scores_b: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """GAUC(a) - GAUC(b) on the same rows, with its interval, users as the unit.

    GAUC is a ratio of sums over users (sum of rows * AUC over sum of rows), and each user's two
    AUCs are paired: the variance is the ratio estimator's (linearized, with the n/(n-1)
    correction), computed from the per-user differences. It holds however a user's rows are
    correlated; it conditions on the users counted (those with both classes).
    """
    scores_a, scores_b, labels, groups = _vectors(
        finite_scores(scores_a), finite_scores(scores_b), labels, groups
    )
    _, auc_a, weights, _ = _user_aucs(scores_a, labels, groups)
    _, auc_b, _, _ = _user_aucs(scores_b, labels, groups)
    users = len(weights)
    if users < 2:
        delta, se = math.nan, math.nan
    else:
        total = weights.sum()
        diff = auc_a - auc_b
        delta = float(np.sum(weights * diff) / total)
        residual = weights * (diff - delta)
        se = math.sqrt(users / (users - 1) * float(np.sum(residual**2))) / total
    return {
        "delta": delta,
        **_interval(delta, se, confidence),
        "confidence": confidence,
        "users": users,
    }


def calibration(prob: np.ndarray, labels: np.ndarray, bins: int = 20) -> dict[str, Any]:
    """Expected calibration error over equal-mass (quantile) bins, plus the reliability table.

    CTR probabilities cluster at low values (most sit well under 0.1), so equal-width bins would
    leave most bins empty and put nearly every row in one or two; equal-mass bins give each bin
    the same number of rows and hence comparable noise.
    """
    prob, labels = _vectors(finite_scores(prob), labels)
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    n = len(prob)
    if n == 0:
        return {"ece": math.nan, "bins": [], "mean_prediction": math.nan, "positive_rate": math.nan}
    p = prob.astype(np.float64)
    y = labels.astype(np.float64)
    order = np.argsort(p, kind="stable")
    table = []
    ece = 0.0
    for chunk in np.array_split(order, min(bins, n)):
        mean_prediction = float(p[chunk].mean())
        positive_rate = float(y[chunk].mean())
        ece += len(chunk) / n * abs(mean_prediction - positive_rate)
        table.append(
            {
                "mean_prediction": mean_prediction,
                "positive_rate": positive_rate,
                "count": len(chunk),
            }
        )
    return {
        "ece": float(ece),
        "bins": table,
        "mean_prediction": float(p.mean()),
        "positive_rate": float(y.mean()),
    }


def roc_points(
    scores: np.ndarray, labels: np.ndarray, max_points: int = 200
) -> list[dict[str, float]]:
    """ROC curve at every distinct threshold (like scikit-learn's, ``drop_intermediate=False``),
    thinned evenly by index to at most ``max_points`` so a report can plot it cheaply.

    The first point is (0, 0) at threshold ``+inf``; thresholds decrease, fpr and tpr never do.
    """
    scores, labels = _vectors(scores, labels)
    if max_points < 2:
        raise ValueError(f"max_points must be >= 2, got {max_points}")
    y = labels.astype(bool)
    positives = int(y.sum())
    negatives = len(y) - positives
    if positives == 0 or negatives == 0:
        raise ValueError("roc_points needs both positive and negative labels")
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    s = scores[order].astype(np.float64)
    last_of_value = np.r_[np.flatnonzero(s[1:] != s[:-1]), len(s) - 1]
    tps = np.cumsum(y[order])[last_of_value]
    fps = last_of_value + 1 - tps
    fpr = np.r_[0.0, fps / negatives]
    tpr = np.r_[0.0, tps / positives]
    thresholds = np.r_[np.inf, s[last_of_value]]
    keep = np.arange(len(fpr))
    if len(keep) > max_points:
        keep = np.unique(np.round(np.linspace(0, len(fpr) - 1, max_points)).astype(np.int64))
    return [
        {"fpr": float(fpr[i]), "tpr": float(tpr[i]), "threshold": float(thresholds[i])}
        for i in keep
    ]


def _structural_components(
    scores: np.ndarray, labels: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """AUC and DeLong's V10 (per positive) and V01 (per negative) from ranks (Sun & Xu 2014).

    V10_i is the share of negatives positive i beats (ties half), V01_j the share of positives
    that beat negative j; both come from mid-ranks in O(n log n) instead of the n_pos*n_neg
    pairwise table.
    """
    x = scores[labels]
    y = scores[~labels]
    m, n = len(x), len(y)
    combined = average_ranks(np.r_[x, y])
    tz_x, tz_y = combined[:m], combined[m:]
    v10 = (tz_x - average_ranks(x)) / n
    v01 = 1.0 - (tz_y - average_ranks(y)) / m
    auc = float((tz_x.sum() - m * (m + 1) / 2.0) / (m * n))
    return auc, v10, v01


def _sample_cov(a: np.ndarray, b: np.ndarray) -> float:
    """Unbiased covariance (ddof=1, as in DeLong); NaN with fewer than two samples."""
    if len(a) < 2:
        return math.nan
    return float(np.sum((a - a.mean()) * (b - b.mean())) / (len(a) - 1))


def _paired(
    name: str, scores_a: np.ndarray, scores_b: np.ndarray, labels: np.ndarray, confidence: float
) -> tuple[np.ndarray, tuple, tuple]:
    """Checked labels and each model's (AUC, V10, V01): the shared start of both comparisons."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    y = labels.astype(bool)
    if y.all() or not y.any():
        raise ValueError(f"{name} needs both positive and negative labels")
    a = _structural_components(scores_a.astype(np.float64), y)
    b = _structural_components(scores_b.astype(np.float64), y)
    return y, a, b


def _interval(delta: float, se: float, confidence: float) -> dict[str, float]:
    """The two-sided interval, z and p-value of ``delta`` with standard error ``se``."""
    z_crit = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    if math.isnan(se):
        z = p_value = math.nan
    elif se == 0.0:
        z = 0.0 if delta == 0.0 else math.copysign(math.inf, delta)
        p_value = 1.0 if delta == 0.0 else 0.0
    else:
        z = delta / se
        p_value = math.erfc(abs(z) / math.sqrt(2.0))
    return {
        "se": se,
        "ci_low": delta - z_crit * se,
        "ci_high": delta + z_crit * se,
        "z": z,
        "p_value": p_value,
    }


def _iid_se(y: np.ndarray, a: tuple, b: tuple) -> float:
    """DeLong's standard error of AUC_a - AUC_b, every row independent."""
    positives, negatives = int(y.sum()), int((~y).sum())
    _, v10_a, v01_a = a
    _, v10_b, v01_b = b
    var_delta = (
        _sample_cov(v10_a, v10_a) + _sample_cov(v10_b, v10_b) - 2 * _sample_cov(v10_a, v10_b)
    ) / positives + (
        _sample_cov(v01_a, v01_a) + _sample_cov(v01_b, v01_b) - 2 * _sample_cov(v01_a, v01_b)
    ) / negatives
    # Rounding can leave a tiny negative variance when the two models are (nearly) identical.
    return math.sqrt(max(var_delta, 0.0)) if not math.isnan(var_delta) else math.nan


def delong(
    scores_a: np.ndarray, scores_b: np.ndarray, labels: np.ndarray, confidence: float = 0.95
) -> dict[str, Any]:
    """Paired DeLong test (DeLong et al. 1988) of AUC_a - AUC_b for two models on the same rows.

    Closed form, deterministic and O(n log n) (Sun & Xu 2014), and it accounts for the pairing
    (both models scored the same rows). It treats every row as independent; rows of one user are
    not, which makes its interval too narrow on click logs: the gate reads
    :func:`clustered_delong`, which keeps these figures beside its own.

    With a single positive or a single negative the variance is undefined and se, the interval,
    z and p_value come back NaN.
    """
    scores_a, scores_b, labels = _vectors(finite_scores(scores_a), finite_scores(scores_b), labels)
    y, a, b = _paired("delong", scores_a, scores_b, labels, confidence)
    delta = a[0] - b[0]
    return {
        "auc_a": a[0],
        "auc_b": b[0],
        "delta": delta,
        **_interval(delta, _iid_se(y, a, b), confidence),
        "confidence": confidence,
        "positives": int(y.sum()),
        "negatives": int((~y).sum()),
    }


def clustered_delong(
    scores_a: np.ndarray,
    scores_b: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Paired comparison of AUC_a - AUC_b with users (``groups``) as the unit (Obuchowski 1997).

    The AUC is the mean of per-row structural components (DeLong's V10 per click, V01 per
    non-click); rows of one user share that user's taste and the models' errors about it, so
    their components are correlated and the variance must be taken over users. Each user's
    contribution to the difference is ``z_u = (sum_u D10)/M + (sum_u D01)/N`` with
    ``D10 = V10_a - V10_b - (AUC_a - AUC_b)`` over the user's clicks (and D01 likewise over
    non-clicks); the z_u sum to zero and ``var = U/(U-1) * sum z_u^2`` over the U users. With one
    row per user it is DeLong's variance again.

    Why this rather than a user-block bootstrap: it is closed form, so one test day always gives
    the same decision with no seed to carry, and it costs two sorts per model (10 M rows in
    seconds) where a bootstrap costs a thousand AUCs; ``benchmarks/gate.py`` checks its coverage
    by simulation and the unit tests check it against a user-block bootstrap. DeLong's i.i.d.
    figures come back under ``iid`` for comparison. Undefined (NaN se) with fewer than two users
    or without both labels' structure, as DeLong's.
    """
    scores_a, scores_b, labels, groups = _vectors(
        finite_scores(scores_a), finite_scores(scores_b), labels, groups
    )
    y, a, b = _paired("clustered_delong", scores_a, scores_b, labels, confidence)
    delta = a[0] - b[0]
    _, user = np.unique(groups, return_inverse=True)
    users = int(user.max()) + 1
    positives, negatives = int(y.sum()), int((~y).sum())
    d10 = a[1] - b[1] - delta
    d01 = a[2] - b[2] - delta
    z = (
        np.bincount(user[y], weights=d10, minlength=users) / positives
        + np.bincount(user[~y], weights=d01, minlength=users) / negatives
    )
    se = math.sqrt(users / (users - 1) * float(np.sum(z * z))) if users > 1 else math.nan
    if min(positives, negatives) < 2:  # as DeLong: one click says nothing of the spread
        se = math.nan
    weight = (
        np.bincount(user[y], minlength=users) / positives
        + np.bincount(user[~y], minlength=users) / negatives
    ) / 2
    return {
        "auc_a": a[0],
        "auc_b": b[0],
        "delta": delta,
        **_interval(delta, se, confidence),
        "confidence": confidence,
        "method": "users as the unit (clustered DeLong, Obuchowski 1997)",
        "positives": positives,
        "negatives": negatives,
        "users": users,
        "effective_users": effective_users(weight),
        "largest_user_share": float(weight.max()),
        "iid": _interval(delta, _iid_se(y, a, b), confidence),
    }


def effective_users(weight: np.ndarray) -> float:
    """Kish's effective number of users of weights that sum to 1: ``1 / sum(w^2)``.

    A user's weight is their share of the AUC's structure (half their share of the clicks, half
    of the non-clicks): ``U`` alike users give ``U``, and one user holding most of the day gives
    little more than 1, however many users share the rest. The clustered interval's variance is a
    sum over users; with few effective ones it is estimated from a handful of terms and its
    coverage falls short of what it says (``MIN_EFFECTIVE_USERS``)."""
    weight = np.asarray(weight, dtype=np.float64)
    total = float(np.sum(weight * weight))
    return 1.0 / total if total > 0 else 0.0


def score_spread(prob: np.ndarray) -> dict[str, Any]:
    """How much a model's scores vary: distinct values, the largest share of rows on one score,
    the logits' standard deviation, and ``flat``: why they are (near-)constant, else None.

    A constant scorer's AUC is exactly 0.5 and a near-constant one ranks by rounding noise, so
    either clears a floor of 0.5 by chance; the gate refuses them by name."""
    prob = np.asarray(prob, dtype=np.float64)
    _, counts = np.unique(prob, return_counts=True)
    top = float(counts.max() / len(prob)) if len(prob) else 1.0
    clipped = np.clip(prob, 1e-7, 1 - 1e-7)
    sd = float(np.std(np.log(clipped / (1 - clipped)))) if len(prob) else 0.0
    flat = None
    if len(counts) <= 1:
        flat = "constant scores (one value for every row)"
    elif top >= FLAT_SHARE:
        flat = f"near-constant scores ({top:.1%} of the rows on one value)"
    elif sd < FLAT_LOGIT_SD:
        flat = f"near-constant scores (logit sd {sd:.2g} < {FLAT_LOGIT_SD:g})"
    return {"distinct": int(len(counts)), "top_share": top, "logit_sd": sd, "flat": flat}


def clustered_auc(
    scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, confidence: float = 0.95
) -> dict[str, Any]:
    """One model's AUC with its interval, users as the unit (DeLong's row-level one under ``iid``).

    The comparison with a constant scorer: its AUC is exactly 0.5 and its structural components
    are all 0.5, so the paired difference's variance is the AUC's own.
    """
    r = clustered_delong(scores, np.zeros(len(np.asarray(scores))), labels, groups, confidence)
    return {
        "auc": r["auc_a"],
        "se": r["se"],
        "ci_low": r["ci_low"] + 0.5,
        "ci_high": r["ci_high"] + 0.5,
        "confidence": confidence,
        "users": r["users"],
        "effective_users": r["effective_users"],
        "iid": {
            "se": r["iid"]["se"],
            "ci_low": r["iid"]["ci_low"] + 0.5,
            "ci_high": r["iid"]["ci_high"] + 0.5,
        },
    }


def detectable_effect(
    se: float, tolerance: float, confidence: float = 0.95, power: float = 0.8
) -> float:
    """The smallest true AUC loss the gate refuses with probability ``power``.

    The gate refuses when the interval's upper bound ``delta + z_c * se`` falls below
    ``-tolerance``; with ``delta ~ N(-loss, se)`` that happens with probability ``power`` once
    ``loss = tolerance + (z_c + z_power) * se`` (2.80 standard errors at 95% / 80%).
    """
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    normal = NormalDist()
    return tolerance + (normal.inv_cdf(0.5 + confidence / 2.0) + normal.inv_cdf(power)) * se


def summarize(
    prob: np.ndarray, labels: np.ndarray, groups: np.ndarray, bins: int = 20
) -> dict[str, Any]:
    """The headline numbers of one evaluation in a single flat dict, ready for a JSON report."""
    prob, labels, groups = _vectors(prob, labels, groups)
    g = gauc(prob, labels, groups)
    cal = calibration(prob, labels, bins=bins)
    return {
        "auc": roc_auc(prob, labels),
        "gauc": g["gauc"],
        "logloss": logloss(prob, labels),
        "ece": cal["ece"],
        "mean_prediction": cal["mean_prediction"],
        "positive_rate": cal["positive_rate"],
        "rows": len(prob),
        "users": g["groups"],
        "users_counted_gauc": g["groups_counted"],
    }
