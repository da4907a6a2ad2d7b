"""Slow references straight from a definition, which the fast code is checked against."""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.common.dataset import COUNT_ENTITIES, DENSE_FEATURES, USER_ENTITIES
from components.preprocess.counts import NEVER_SECONDS, PRIOR_WEIGHT, pair_key


def brute_force_features(df: pd.DataFrame) -> np.ndarray:
    """Row by row, straight from the definition: every earlier row, nothing at or after."""
    user = df.user_key.to_numpy()
    keys = {
        "item": df.item_key.to_numpy(),
        "user": user,
        "category": df.cat_key.to_numpy(),
        "user_category": pair_key(user, df.cat_key.to_numpy()),
        "user_item": pair_key(user, df.item_key.to_numpy()),
    }
    ts, label = df.ts.to_numpy(), df.label.to_numpy()
    out = np.zeros((len(df), len(DENSE_FEATURES)))
    for i in range(len(df)):
        earlier = ts < ts[i]
        prior = (label[earlier].sum() + 1.0) / (earlier.sum() + 2.0)
        col = 0
        for entity in COUNT_ENTITIES:
            same = earlier & (keys[entity] == keys[entity][i])
            imps, clicks = same.sum(), label[same].sum()
            rate = (clicks + PRIOR_WEIGHT * prior) / (imps + PRIOR_WEIGHT)
            out[i, col : col + 3] = np.log1p(imps), np.log1p(clicks), np.log(rate / (1 - rate))
            col += 3
        for entity in USER_ENTITIES:
            mine = earlier & (keys[entity] == keys[entity][i])
            for mask in (mine, mine & (label == 1)):
                seconds = (
                    min(ts[i] - ts[mask].max(), NEVER_SECONDS) if mask.any() else NEVER_SECONDS
                )
                out[i, col] = np.log1p(seconds)
                col += 1
    return out
