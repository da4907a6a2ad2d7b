"""Real public logs: MovieLens-100K, fetched from PyPI (the ``recbole`` wheel) at test time,
preprocessed, trained on and evaluated as the quality benchmark does, one epoch."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from benchmarks import movielens, quality, worlds
from components.common.metrics import roc_auc
from tests.tools import missing

pytestmark = pytest.mark.integration

WORLD = next(w for w in worlds.WORLDS if w.source == "MovieLens-100K")


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    out = tmp_path_factory.mktemp("movielens") / "raw"
    try:
        movielens.fetch(out)
    except movielens.MovieLensError as exc:
        missing("MovieLens-100K", str(exc))
    return out


def test_the_real_logs_are_the_published_ratings(raw):
    record = json.loads((raw / movielens.MARKER).read_text())
    assert record["sha256"] == movielens.SHA256
    assert len(list(raw.glob("dt=*/part-0.parquet"))) == record["days"]


def test_dailyrec_learns_real_logs_beyond_the_item_prior(raw, tmp_path):
    shutil.copytree(raw, tmp_path / WORLD.name / "raw")  # kept: no second download
    _, data = worlds.prepare(WORLD, tmp_path)
    meta = json.loads((data / "meta.json").read_text())
    assert meta["splits"]["test"]["rows"] > 10_000  # four weeks of a few hundred users
    scores, extra = worlds.train_dailyrec(data, tmp_path / WORLD.name, epochs=1)
    test = quality.split_arrays(data, "test")
    labels = np.asarray(test["label"])
    column = quality.DENSE_FEATURES.index("item_click_logit")
    prior = roc_auc(np.asarray(test["dense"][:, column], np.float64), labels)
    assert roc_auc(scores, labels) > prior + 0.02
    # as served (serving's own code, the state at the test weeks' start) it stays clearly above
    assert extra["served"]["auc"] > prior + 0.02
    assert abs(extra["served"]["skew"]["delta"]) < 0.01
