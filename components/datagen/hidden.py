"""The per-item and per-user effects a generated world hides, for reports only.

A model has to learn each item's quality and each user's click bias from their
impressions; the oracle (the ``_truth`` sidecar's ``p``) knows them exactly.
``benchmarks/quality.py`` uses these arrays to measure how much of the gap
between a model and the oracle no model could close from the logs. Nothing
that trains reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.datagen.generator import (
    APPEAL_QUALITY_SD,
    ID_PREFIXES,
    USER_BIAS_SD,
    DatagenConfig,
    _World,
)


@dataclass(frozen=True)
class HiddenEffects:
    """Logit effects the generator adds to every exposure, indexed by id - 1.

    ``item_appeal = popularity part + item_quality`` and ``user_bias = activity part +
    user_noise``; the popularity and activity parts show in the impression counts, the
    quality (sd ``quality_sd``) and the noise (sd ``noise_sd``) only in the clicks.
    """

    item_quality: np.ndarray
    user_noise: np.ndarray
    quality_sd: float = APPEAL_QUALITY_SD
    noise_sd: float = USER_BIAS_SD

    @classmethod
    def of(cls, config: DatagenConfig) -> HiddenEffects:
        """Rebuilt from the config's seed, exactly as ``generate`` draws the world."""
        world = _World(config, np.random.default_rng(config.seed))
        return cls(world.item_quality, world.user_noise)


def id_index(ids: np.ndarray, column: str) -> np.ndarray:
    """Generator index (id - 1) of raw ids written as ints or as prefixed strings."""
    values = np.asarray(ids)
    if values.dtype.kind in "iu":
        return values.astype(np.int64) - 1
    prefix = ID_PREFIXES[column]
    return np.array([int(str(v).removeprefix(prefix)) for v in values], np.int64) - 1
