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


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & 0xFFFFFFFFFFFFFFFF


def siphash24(key: bytes, data: bytes) -> int:
    """Plain-Python SipHash-2-4 (the reference the vectorized id hash must equal;
    tests/unit/test_hashing.py checks it against the published test vector)."""
    mask = 0xFFFFFFFFFFFFFFFF
    k0 = int.from_bytes(key[:8], "little")
    k1 = int.from_bytes(key[8:], "little")
    v = [
        k0 ^ 0x736F6D6570736575,
        k1 ^ 0x646F72616E646F6D,
        k0 ^ 0x6C7967656E657261,
        k1 ^ 0x7465646279746573,
    ]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & mask
            v[1] = _rotl(v[1], 13)
            v[1] ^= v[0]
            v[0] = _rotl(v[0], 32)  # noqa: E702
            v[2] = (v[2] + v[3]) & mask
            v[3] = _rotl(v[3], 16)
            v[3] ^= v[2]  # noqa: E702
            v[0] = (v[0] + v[3]) & mask
            v[3] = _rotl(v[3], 21)
            v[3] ^= v[0]  # noqa: E702
            v[2] = (v[2] + v[1]) & mask
            v[1] = _rotl(v[1], 17)
            v[1] ^= v[2]
            v[2] = _rotl(v[2], 32)  # noqa: E702

    tail_len = len(data) % 8
    for i in range(0, len(data) - tail_len, 8):
        m = int.from_bytes(data[i : i + 8], "little")
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    last = (len(data) & 0xFF) << 56 | int.from_bytes(data[len(data) - tail_len :], "little")
    v[3] ^= last
    rounds(2)
    v[0] ^= last
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def splitmix64_finalizer(x: int) -> int:
    """SplitMix64's finalizer, the mixing step after SipHash in the id hash."""
    mask = 0xFFFFFFFFFFFFFFFF
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)
