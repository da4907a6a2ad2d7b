"""The quality benchmark's data-limited oracle: the generator's hidden effects, and how much of
them the impressions before a row reveal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.quality import data_limited_oracle
from components.common.dataset import DENSE_FEATURES
from components.common.schema import datagen_summary
from components.datagen import generator
from components.datagen.hidden import HiddenEffects, id_index


def _rows(impressions: float, n: int = 6) -> tuple[pd.DataFrame, np.ndarray]:
    truth = pd.DataFrame(
        {
            "p": np.linspace(0.02, 0.3, n),
            "item_id": np.arange(1, n + 1),
            "user_id": np.array([1, 2, 1, 3, 2, 1])[:n],
        }
    )
    dense = np.zeros((n, len(DENSE_FEATURES)), np.float32)
    for feature in ("item_log_impressions", "user_log_impressions"):
        dense[:, DENSE_FEATURES.index(feature)] = np.log1p(impressions)
    return truth, dense


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


HIDDEN = HiddenEffects(
    item_quality=np.array([0.5, -0.4, 0.9, 0.0, -1.1, 0.3]),
    user_noise=np.array([0.2, -0.3, 0.6]),
)


def test_unseen_items_and_users_lose_their_hidden_effects_exactly():
    truth, dense = _rows(impressions=0)
    limited = data_limited_oracle(truth, dense, HIDDEN)
    expected = (
        _logit(truth["p"].to_numpy())
        - HIDDEN.item_quality[truth["item_id"] - 1]
        - HIDDEN.user_noise[truth["user_id"] - 1]
    )
    np.testing.assert_allclose(_logit(limited), expected, atol=1e-5)


def test_items_and_users_seen_very_often_are_known_as_the_oracle_knows_them():
    truth, dense = _rows(impressions=1e9)
    limited = data_limited_oracle(truth, dense, HIDDEN)
    np.testing.assert_allclose(_logit(limited), _logit(truth["p"].to_numpy()), atol=2e-3)


def test_a_few_impressions_reveal_part_of_the_effect_and_the_draw_is_seeded():
    truth, dense = _rows(impressions=30)
    first, again = (data_limited_oracle(truth, dense, HIDDEN, seed=3) for _ in range(2))
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, data_limited_oracle(truth, dense, HIDDEN, seed=4))
    # across many draws the estimate is shrunk toward 0: E[estimate] = shrink * true
    draws = np.mean(
        [_logit(data_limited_oracle(truth, dense, HIDDEN, seed=s)) for s in range(2000)], axis=0
    )
    without = _logit(data_limited_oracle(*_rows(impressions=0), HIDDEN))
    revealed = (draws - without) / (_logit(truth["p"].to_numpy()) - without)
    assert np.all((revealed > 0.2) & (revealed < 0.9))


def test_hidden_effects_split_appeal_and_bias_as_the_generator_draws_them(tmp_path):
    config = generator.DatagenConfig(out=tmp_path / "w", users=20_000, items=40_000, seed=3)
    hidden = HiddenEffects.of(config)
    world = generator._World(config, np.random.default_rng(config.seed))
    assert hidden.item_quality.std() == pytest.approx(generator.APPEAL_QUALITY_SD, rel=0.03)
    assert hidden.user_noise.std() == pytest.approx(generator.USER_BIAS_SD, rel=0.03)
    # what remains of appeal is the popularity part: a function of popularity alone
    rest = world.item_appeal - hidden.item_quality
    np.testing.assert_allclose(
        rest,
        generator.APPEAL_PER_LOG_POPULARITY * np.log(world.item_popularity)
        + rest[0]
        - generator.APPEAL_PER_LOG_POPULARITY * np.log(world.item_popularity[0]),
        atol=1e-9,
    )
    assert abs(np.corrcoef(hidden.user_noise, world.user_bias - hidden.user_noise)[0, 1]) < 0.05


def test_id_index_reads_int_and_prefixed_string_ids():
    np.testing.assert_array_equal(id_index(np.array([1, 42]), "item_id"), [0, 41])
    np.testing.assert_array_equal(id_index(np.array(["i1", "i42"], object), "item_id"), [0, 41])
    np.testing.assert_array_equal(id_index(np.array(["u7"], object), "user_id"), [6])


def test_the_world_rebuilt_from_datagen_json_is_the_one_that_wrote_the_logs(tmp_path):
    """Ids read back from the raw files (string ids here) index the rebuilt world: its item
    appeal scores each day's labels exactly as the generator recorded (_datagen.json)."""
    import json

    import pyarrow.parquet as pq

    from components.common.metrics import roc_auc

    raw = tmp_path / "raw"
    generator.generate(
        generator.DatagenConfig(
            out=raw,
            days=2,
            users=300,
            items=500,
            categories=20,
            events_per_day=3000,
            seed=11,
            id_format="str",
        )
    )
    summary = json.loads(datagen_summary(raw).read_text())
    config = generator.written(raw)
    world = generator._World(config, np.random.default_rng(config.seed))
    hidden = HiddenEffects.of(config)
    for day, recorded in summary["popularity_auc"].items():
        table = pq.read_table(raw / f"dt={day}").to_pandas()
        items = id_index(table["item_id"].to_numpy(), "item_id")
        assert round(roc_auc(world.item_appeal[items], table["label"].to_numpy()), 6) == recorded
        # the hidden part alone still ranks clicks, less well than the whole appeal
        assert 0.5 < roc_auc(hidden.item_quality[items], table["label"].to_numpy()) <= recorded
