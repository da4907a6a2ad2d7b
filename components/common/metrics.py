"""Ranking metrics shared by datagen, train and evaluate (exact, tie-aware)."""

from __future__ import annotations

import math

import numpy as np


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``; tied values share the mean of their ranks."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    group_starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    group_ends = np.r_[group_starts[1:], len(values)]
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat((group_starts + group_ends + 1) / 2.0, group_ends - group_starts)
    return ranks


def finite_scores(scores) -> np.ndarray:
    """``scores`` as an array, refused (``ValueError``) when any is NaN or infinite: NaN has no
    rank, so a metric of such scores would depend on row order."""
    scores = np.asarray(scores)
    bad = ~np.isfinite(scores)
    if bad.any():
        raise ValueError(
            f"{int(bad.sum()):,} of {len(scores):,} scores are NaN or infinite (first at row "
            f"{int(np.flatnonzero(bad)[0])}): a model scoring them is broken; no metric of them"
        )
    return scores


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Exact ROC AUC (Mann-Whitney, ties count half), equal to scikit-learn's; NaN without both classes.

    Scores must be finite: NaN has no rank (the AUC of NaN scores would depend on row order), so
    a ``ValueError`` names how many are not."""
    scores = finite_scores(scores)
    labels = np.asarray(labels).astype(bool)
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return math.nan
    rank_sum = average_ranks(scores)[labels].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))
