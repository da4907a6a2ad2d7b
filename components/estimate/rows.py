"""The rows an epoch trains on: a split's positives and negatives, and the share of negatives
kept (every positive is). Counted from the split's ``meta.json`` entry, before any data is read."""

from __future__ import annotations


def split_labels(split: dict) -> tuple[int, int]:
    """(positives, negatives) of a split from its ``meta.json`` entry."""
    rows = int(split["rows"])
    positives = round(rows * float(split.get("positive_rate") or 0.0))
    return positives, rows - positives


def negative_share(split: dict, negative_keep: float, negatives_per_positive: float) -> float:
    """The share of the split's negatives an epoch trains on: ``negative_keep``, lowered so that
    at most ``negatives_per_positive`` negatives are kept per positive (0: no such limit). Four
    significant digits: the plan states it and the model's logit shift is its log."""
    positives, negatives = split_labels(split)
    if not negatives_per_positive or not positives or not negatives:
        return negative_keep
    share = min(negative_keep, negatives_per_positive * positives / negatives)
    return float(f"{share:.4g}")


def trained_rows(split: dict, negative_keep: float) -> int:
    """Rows an epoch trains on: every positive and the kept share of the negatives (expected)."""
    positives, negatives = split_labels(split)
    return positives + round(negatives * negative_keep)
