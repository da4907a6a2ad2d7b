"""What is judged is what is served: a day scored the way serving scores it.

One raw log, three datasets: ``before`` (days 1-4), ``after`` (days 1-5, the test day 5 spread
over the day, users with several rows in it) and ``two_days`` (days 1-5, days 4 and 5 the test
split). Serving builds a day-5 row from the snapshot at
the end of day 4 plus the events its caller sends since; with the user's earlier events of the
day sent along, its histories and user counts are the dataset's, and evaluate's served AUC
equals its AUC on the dataset's features within noise. From the snapshot alone they are not.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pandas as pd
import pytest

from components.common import schema
from components.common.dataset import DENSE_FEATURES, USER_EVENTS_DIR
from components.common.dataset_meta import DatasetMeta
from components.common.metrics import roc_auc
from components.common.plan import TrainPlan, write_plan
from components.evaluate.decision import GateRule
from components.evaluate.served import MATCH, ServedSplit
from components.evaluate.stage import EvaluateConfig, EvaluateError, evaluate
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import preprocess
from components.score.features import (
    SNAPSHOT_SECONDS,
    Layout,
    Snapshot,
    request_inputs,
    write_snapshot,
)
from components.train.inference import load_scorer, predict_logits, split_rows
from components.train.model import BATCH_KEYS, Vocab
from components.train.trainer import TrainConfig, train
from tests.conftest import START, write_day

pytestmark = pytest.mark.integration
DAY5 = START + dt.timedelta(days=4)
EXACT = [
    j
    for j, name in enumerate(DENSE_FEATURES)
    if name.startswith("user") and not name.endswith("click_logit")
]
"""The user-level columns a served row shares bit for bit (the click logits read the global
click rate, which serving holds at the snapshot's)."""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    rng = np.random.default_rng(5)
    raw = root / "raw"
    frames = {}
    for i in range(5):
        day = START + dt.timedelta(days=i)
        n = 600
        item = rng.integers(0, 120, n)
        frames[day] = pd.DataFrame(
            {
                "user_id": rng.integers(1, 40, n),
                "item_id": item,
                "category_id": item % 11,
                "timestamp": schema.day_start_epoch(day) + rng.integers(0, 86_000, n),
                "label": (rng.random(n) < 0.25 + 0.3 * (item % 3 == 0)).astype(np.int8),
            }
        )
        write_day(raw, day, frames[day])
    common = dict(
        raw=str(raw),
        history_days=0,
        seq_len=6,
        neg_len=4,
        rows_per_partition=800,
        item_buckets=512,
        category_buckets=32,
        user_buckets=128,
        val_days=1,
    )
    before, after = root / "before", root / "after"
    preprocess(PreprocessConfig(out=str(before), days=4, end_date=DAY5 - dt.timedelta(1), **common))
    preprocess(PreprocessConfig(out=str(after), days=5, end_date=DAY5, **common))
    two_days = root / "two_days"
    preprocess(PreprocessConfig(out=str(two_days), days=5, end_date=DAY5, test_days=2, **common))
    plan = write_plan(
        root / "plan.json",
        TrainPlan(
            model="debug", micro_batch=256, num_workers=0, lr=3e-3, eval_batch=4096, max_epochs=2
        ),
    )
    train(TrainConfig(data=str(before), out=str(root / "train"), plan=str(plan)))
    return {"root": root, "raw": frames, "before": before, "after": after, "two_days": two_days}


def _test_rows(data) -> dict:
    (batch,) = split_rows(data, "test", DatasetMeta.read(data), 10**6, keys=(*BATCH_KEYS, *MATCH))
    return {k: np.asarray(v) for k, v in batch.items()}


def _served(data, day_events: bool, daily: bool = True, resolution: int = 1) -> dict:
    """The test rows as served (split order): one serving day at a time, as evaluate serves
    them, or (``daily`` False) every day from the snapshot at the split's start; the snapshot's
    times at ``resolution`` seconds (1: exact, where serving's arrays are the dataset's)."""
    meta = DatasetMeta.read(data)
    layout = Layout.of(Vocab.from_meta(meta))
    rows = _test_rows(data)
    split = ServedSplit.read(
        data, {c: rows[c] for c in MATCH}, layout, meta.split("test").day_list if daily else ()
    )
    parts, order = [], []
    for day in split.days():
        snapshot = day.snapshot(layout, resolution)
        with np.errstate(invalid="ignore"):  # batches of 97 cut users apart
            parts += list(day.batches(snapshot, layout, 97, day_events))
        order.append(day.order)
    served = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.concatenate(order)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return {k: v[back] for k, v in served.items()}


def test_a_split_of_several_days_is_served_each_day_from_the_state_at_its_start(world):
    """Day 5 of a two-day test split is served exactly as a split of day 5 alone (the same
    window before it); from the state at day 4's start, its item counts would lack day 4."""
    two_days = _test_rows(world["two_days"])
    day5 = two_days["ts"] >= schema.day_start_epoch(DAY5)
    assert 0 < day5.sum() < len(day5)
    daily = _served(world["two_days"], day_events=True)
    alone = _served(world["after"], day_events=True)
    key = ("user_key", "ts", "target_item", "label")
    by_row = np.lexsort([alone[c] for c in key])
    mine = np.flatnonzero(day5)[np.lexsort([daily[c][day5] for c in key])]
    for name in (*BATCH_KEYS, *MATCH):
        assert np.array_equal(daily[name][mine], alone[name][by_row]), name
    stale = _served(world["two_days"], day_events=True, daily=False)
    impressions = DENSE_FEATURES.index("item_log_impressions")
    assert (daily["dense"][day5, impressions] > stale["dense"][day5, impressions]).mean() > 0.5
    assert np.array_equal(daily["dense"][~day5], stale["dense"][~day5])  # day 4: the same state


def test_a_day_served_with_its_events_has_the_datasets_histories_and_user_counts(world):
    rows = _test_rows(world["after"])
    served = _served(world["after"], day_events=True)
    alone = _served(world["after"], day_events=False)
    for c in MATCH:  # lined up row for row
        assert np.array_equal(served[c], rows[c]), c
    earlier = (alone["hist_item"] != rows["hist_item"]).any(1) | (
        alone["neg_item"] != rows["neg_item"]
    ).any(1)
    assert earlier.mean() > 0.3  # many rows had events earlier that day
    for key in ("hist_item", "hist_cat", "hist_gap", "hist_len", "neg_item", "neg_cat", "neg_len"):
        assert np.array_equal(served[key], rows[key]), key
    for key in ("hist_item", "hist_gap", "neg_item", "neg_gap"):
        assert not np.array_equal(alone[key], rows[key]), key
    assert np.array_equal(served["dense"][:, EXACT], rows["dense"][:, EXACT])
    assert not np.array_equal(alone["dense"][:, EXACT], rows["dense"][:, EXACT])


def test_a_snapshot_at_its_resolution_moves_times_only_and_never_later(world):
    """A registered snapshot keeps its times at ``SNAPSHOT_SECONDS``: the rows' items, categories,
    lengths and counts are the exact snapshot's; only the time gaps and recencies move, and
    only shorter (times rounded up, never past the window's end)."""
    exact = _served(world["after"], day_events=False)
    coarse = _served(world["after"], day_events=False, resolution=SNAPSHOT_SECONDS)
    for key in ("hist_item", "hist_cat", "hist_len", "neg_item", "neg_cat", "neg_len"):
        assert np.array_equal(coarse[key], exact[key]), key
    times = [i for i, n in enumerate(DENSE_FEATURES) if "_seconds_since_" in n]
    counts = [i for i in range(len(DENSE_FEATURES)) if i not in times]
    assert np.array_equal(coarse["dense"][:, counts], exact["dense"][:, counts])
    assert not np.array_equal(coarse["dense"][:, times], exact["dense"][:, times])
    assert (coarse["dense"][:, times] <= exact["dense"][:, times] + 1e-6).all()
    for key in ("hist_gap", "neg_gap"):
        assert not np.array_equal(coarse[key], exact[key]), key
        assert (coarse[key] <= exact[key]).all(), key


def test_a_request_continuing_the_snapshot_ignores_events_the_snapshot_holds(world, tmp_path):
    files = write_snapshot(world["before"], tmp_path)
    snapshot = Snapshot.load(files["count_state"], files["user_state"])
    layout = Layout.of(Vocab.from_meta(DatasetMeta.read(world["after"])))
    day = world["raw"][DAY5].drop_duplicates().sort_values("timestamp").reset_index(drop=True)
    window = pd.concat([f for d, f in world["raw"].items() if d != DAY5]).drop_duplicates()
    base = day[["user_id", "item_id", "category_id", "timestamp"]]

    def with_events(history: pd.DataFrame) -> pd.DataFrame:
        out = base.copy()
        for column in ("item_id", "category_id", "timestamp", "label"):
            out[f"events_{column}"] = [
                history[(history.user_id == u) & (history.timestamp < t)][column].tolist()
                for u, t in zip(day.user_id, day.timestamp, strict=True)
            ]
        return out

    since = request_inputs(with_events(day), snapshot, layout)
    everything = request_inputs(with_events(pd.concat([window, day])), snapshot, layout)
    for key in (*BATCH_KEYS, "user_key", "ts"):
        assert np.array_equal(since[key], everything[key]), key
    alone = request_inputs(base, snapshot, layout)
    assert (since["neg_item"] != alone["neg_item"]).any(1).mean() > 0.3


def test_evaluate_judges_the_model_as_served(world, tmp_path):
    out = tmp_path / "eval"
    result = evaluate(
        EvaluateConfig(
            data=str(world["after"]),
            checkpoint=str(world["root"] / "train" / "best.pt"),
            out=str(out),
            rule=GateRule(min_auc=0.5),
        )
    )
    metrics, decision = result.metrics, result.decision
    served = metrics.served
    skew = served["skew"]
    assert served["auc"] == decision.served_auc == skew["auc_b"]
    assert skew["auc_a"] == pytest.approx(metrics.test_auc, abs=1e-12)
    assert skew["ci_low"] <= 0 <= skew["ci_high"]  # within noise
    assert served["snapshot_only_auc"]["auc"] != served["auc"]
    assert decision.reasons[0].startswith(f"served AUC {served['auc']:.4f} >= min_auc")
    report = (out / "report.md").read_text()
    assert "Train-serve skew" in report and f"{served['auc']:.4f}" in report
    assert json.loads((out / "metrics.json").read_text())["served"]["auc"] == served["auc"]


def test_evaluate_serves_a_split_of_several_days_one_day_at_a_time(world, tmp_path):
    checkpoint = world["root"] / "train" / "best.pt"
    result = evaluate(
        EvaluateConfig(
            data=str(world["two_days"]), checkpoint=str(checkpoint), out=str(tmp_path / "eval")
        )
    )
    model = load_scorer(checkpoint).model
    labels = _test_rows(world["two_days"])["label"]
    auc = {
        daily: roc_auc(
            predict_logits(
                model, [_served(world["two_days"], True, daily, resolution=SNAPSHOT_SECONDS)]
            ),
            labels,
        )
        for daily in (True, False)
    }
    assert auc[True] != pytest.approx(auc[False], abs=1e-6)
    assert result.metrics.served["auc"] == pytest.approx(auc[True], abs=1e-9)


def test_a_dataset_without_its_users_events_is_refused_by_name(world, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(world["after"], copy)
    shutil.rmtree(copy / USER_EVENTS_DIR)
    with pytest.raises(
        EvaluateError, match=rf"{copy}: no {USER_EVENTS_DIR}/ .*preprocess the window"
    ):
        evaluate(
            EvaluateConfig(
                data=str(copy),
                checkpoint=str(world["root"] / "train" / "best.pt"),
                out=str(tmp_path / "eval"),
            )
        )


def test_the_evaluation_run_is_named_by_its_day_and_names_its_dataset(world, tmp_path):
    from mlflow import MlflowClient

    from components.common.tracking import sqlite_uri

    uri = sqlite_uri(tmp_path / "mlruns")
    result = evaluate(
        EvaluateConfig(
            data=str(world["after"]),
            checkpoint=str(world["root"] / "train" / "best.pt"),
            out=str(tmp_path / "eval"),
            tracking_uri=uri,
            rule=GateRule(min_auc=0.5),
        )
    )
    run = MlflowClient(uri).get_run(result.metrics.mlflow_run_id)
    assert run.info.run_name == f"evaluate-{DAY5}"
    (given,) = run.inputs.dataset_inputs
    assert given.dataset.name == world["after"].name
    assert given.dataset.digest == DatasetMeta.read(world["after"]).fingerprint[:16]
    assert {t.key: t.value for t in given.tags}["mlflow.data.context"] == "evaluation"
