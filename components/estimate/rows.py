"""The rows an epoch trains on: the share of a split's negatives kept (every positive is), counted
from the split's record in ``meta.json`` before any data is read."""

from __future__ import annotations

from components.common.dataset_meta import SplitInfo


def negative_share(split: SplitInfo, negative_keep: float, negatives_per_positive: float) -> float:
    """The share of the split's negatives an epoch trains on: ``negative_keep``, lowered so that
    at most ``negatives_per_positive`` negatives are kept per positive (0: no such limit). Four
    significant digits: the plan states it and the model's logit shift is its log."""
    positives, negatives = split.label_counts
    if not negatives_per_positive or not positives or not negatives:
        return negative_keep
    share = min(negative_keep, negatives_per_positive * positives / negatives)
    return float(f"{share:.4g}")


def trained_rows(split: SplitInfo, negative_keep: float) -> int:
    """Rows an epoch trains on: every positive and the kept share of the negatives (expected)."""
    positives, negatives = split.label_counts
    return positives + round(negatives * negative_keep)
