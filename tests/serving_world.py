"""The serving world: one small raw log, two datasets of it, a model trained on the first and a
registered version of it. Shared by the serving tests (``integration/test_serving.py``) and the
reliability tests that serve it (``reliability/test_serving_bounds.py``, ``reliability/test_readers.py``).

Two datasets of the same raw events: ``before`` (days 1-4) and ``after`` (days 1-5, every day-5
event at one second). A model trained on ``before`` carries its snapshot (counts and user events
at the end of day 4); the day-5 rows of ``after`` were built from exactly that knowledge.
Import the fixtures (``world``, ``registered``) into a test module to use them: each module
builds its own.
"""

from __future__ import annotations

import datetime as dt
import warnings

import numpy as np
import pandas as pd
import pytest

from components.common import schema
from components.common.plan import TrainPlan, write_plan
from components.common.tracking import sqlite_uri
from components.evaluate.decision import GateRule
from components.evaluate.stage import EvaluateConfig, evaluate
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import preprocess
from components.register.config import RegisterConfig
from components.register.stage import register
from components.train.trainer import TrainConfig, train
from tests.conftest import START, write_day

NAME = "served"
BUCKETS = {"item_buckets": 512, "category_buckets": 32, "user_buckets": 256}
DAY5 = START + dt.timedelta(days=4)
AT = schema.day_start_epoch(DAY5) + 3600


def _events(rng, day: dt.date, n: int) -> pd.DataFrame:
    item = rng.integers(0, 150, n)
    return pd.DataFrame(
        {
            "user_id": 10**12 + rng.integers(0, 30, n),  # int64 ids beyond int32
            "item_id": item,
            "category_id": item % 13,
            "timestamp": schema.day_start_epoch(day) + rng.integers(0, 150, n) * 500,
            "label": (rng.random(n) < 0.3).astype(np.int8),
        }
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    rng = np.random.default_rng(11)
    raw = root / "raw"
    frames = {}
    for i in range(5):
        day = START + dt.timedelta(days=i)
        frames[day] = _events(rng, day, 400)
    frames[DAY5]["timestamp"] = AT  # one second: no day-5 row sees another
    for day, frame in frames.items():
        write_day(raw, day, frame)
    common = dict(
        raw=str(raw), history_days=0, seq_len=6, neg_len=4, rows_per_partition=600, **BUCKETS
    )
    before, after = root / "before", root / "after"
    preprocess(
        PreprocessConfig(out=str(before), days=4, end_date=START + dt.timedelta(days=3), **common)
    )
    preprocess(PreprocessConfig(out=str(after), days=5, end_date=DAY5, **common))
    plan = write_plan(
        root / "plan.json",
        TrainPlan(
            model="debug", micro_batch=256, num_workers=0, lr=3e-3, eval_batch=4096, max_epochs=1
        ),
    )
    uri = sqlite_uri(root / "mlruns")
    train(TrainConfig(data=str(before), out=str(root / "train"), plan=str(plan), tracking_uri=uri))
    return {
        "root": root,
        "raw": frames,
        "before": before,
        "after": after,
        "uri": uri,
        "checkpoint": root / "train" / "best.pt",
    }


def day5(world) -> pd.DataFrame:
    """Day 5's distinct raw rows (preprocess drops exact duplicates)."""
    return world["raw"][DAY5].drop_duplicates().reset_index(drop=True)


def history_of(world, users) -> pd.DataFrame:
    frames = [f for day, f in world["raw"].items() if day != DAY5]
    return pd.concat(frames).drop_duplicates().query("user_id in @users")


def requests_of(world, with_events: bool) -> pd.DataFrame:
    rows = day5(world)
    out = rows[["user_id", "item_id", "category_id", "timestamp"]].copy()
    if with_events:
        history = history_of(world, set(rows["user_id"]))
        by_user = {u: g for u, g in history.groupby("user_id")}
        empty = history.iloc[:0]
        for raw_column in ("item_id", "category_id", "timestamp", "label"):
            out[f"events_{raw_column}"] = [
                by_user.get(u, empty)[raw_column].tolist() for u in rows["user_id"]
            ]
    return out


@pytest.fixture(scope="module")
def registered(world):
    out = world["root"] / "evaluate"
    result = evaluate(
        EvaluateConfig(
            data=str(world["after"]),
            checkpoint=str(world["checkpoint"]),
            out=str(out),
            model_name=NAME,
            tracking_uri=world["uri"],
            rule=GateRule(min_auc=0.0),
        )
    )
    assert result.decision.blessed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registration = register(
            RegisterConfig(
                checkpoint=str(world["checkpoint"]),
                metrics=str(out / "metrics.json"),
                decision=str(out / "decision.json"),
                model_name=NAME,
                tracking_uri=world["uri"],
                data=str(world["before"]),
            )
        )
    return {
        "registration": registration,
        "metrics": result.metrics,
        "warnings": [str(w.message) for w in caught],
    }
