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


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Exact ROC AUC (Mann-Whitney, ties count half), equal to scikit-learn's; NaN without both classes."""
    labels = np.asarray(labels).astype(bool)
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return math.nan
    rank_sum = average_ranks(scores)[labels].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))
