import json
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from components.common.metrics import roc_auc
from components.common.plan import PLAN_FORMAT, TrainPlan, read_plan, write_plan
from components.train.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
    shape_mismatches,
)
from components.train.schedule import EarlyStopping, warmup_cosine


def test_warmup_is_linear_then_cosine_to_zero():
    total, warmup = 100, 10
    lrs = [warmup_cosine(s, total, warmup) for s in range(total + 1)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[55] == pytest.approx(0.5)
    assert lrs[100] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))  # monotone decay


def test_no_warmup_starts_at_peak():
    assert warmup_cosine(0, 50, 0) == pytest.approx(1.0)


def test_early_stopping_patience_and_min_delta():
    stop = EarlyStopping(patience=2, min_delta=0.01)
    assert stop.update(0.70, 0) and not stop.should_stop
    assert not stop.update(0.705, 1)  # below min_delta: not an improvement
    assert stop.update(0.72, 2) and stop.best_epoch == 2
    assert not stop.update(0.71, 3) and not stop.should_stop
    assert not stop.update(0.72, 4) and stop.should_stop
    restored = EarlyStopping()
    restored.load_state_dict(stop.state_dict())
    assert restored == stop


def test_patience_zero_never_stops():
    stop = EarlyStopping(patience=0)
    for epoch, value in enumerate([0.7, 0.6, 0.5, 0.4]):
        stop.update(value, epoch)
    assert not stop.should_stop


@pytest.mark.parametrize("seed", range(5))
def test_auc_equals_scikit_learn_with_ties(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, 500)
    scores = np.round(rng.normal(size=500) + labels * 0.5, 1)  # rounding makes ties
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert math.isnan(roc_auc(scores, np.zeros(500)))


def test_plan_round_trip_and_errors_name_the_field(tmp_path):
    plan = TrainPlan(micro_batch=64, grad_accum=4, nproc_per_node=2)
    assert plan.global_batch == 512
    path = write_plan(tmp_path / "plan.json", plan, {"micro_batch": "fits"})
    loaded, doc = read_plan(path)
    assert loaded == plan and doc["rationale"] == {"micro_batch": "fits"}
    bad = json.loads(path.read_text())
    bad["train"]["micro_batch"] = 0
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(
        ValueError, match=r"bad\.json: plan\.train\.micro_batch must be an integer >= 1"
    ):
        read_plan(tmp_path / "bad.json")
    bad["train"] = {"micro_batchh": 3}
    (tmp_path / "typo.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="unknown field plan.train.micro_batchh"):
        read_plan(tmp_path / "typo.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something/v9"}))
    with pytest.raises(ValueError, match=f"not a {PLAN_FORMAT} plan"):
        read_plan(tmp_path / "other.json")
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainPlan(precision="fp8")


def test_checkpoint_is_atomic_and_corruption_is_named(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(3)}, "epoch": 2})
    assert load_checkpoint(path)["epoch"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temp files left
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"last\.pt: unreadable or corrupt checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    torch.save({"model": {}}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a dailyrec.checkpoint/v1 checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")


def test_checkpoints_refuse_pickled_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"format": "dailyrec.checkpoint/v1", "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="unreadable or corrupt"):
        load_checkpoint(tmp_path / "evil.pt")


def test_shape_mismatches_are_listed():
    a = {"emb": torch.zeros(10, 4), "b": torch.zeros(2)}
    b = {"emb": torch.zeros(20, 4), "c": torch.zeros(2)}
    problems = shape_mismatches(a, b)
    assert "emb: checkpoint (10, 4) vs model (20, 4)" in problems
    assert "c: missing in checkpoint" in problems and "b: not in this model" in problems


def test_diagnosis_flags_starvation_low_utilization_and_memory():
    from components.train.resources import diagnose

    assert diagnose(0.02, 95.0, 10, 100) == []
    flags = {f["flag"]: f for f in diagnose(0.25, 40.0, 95, 100)}
    assert set(flags) == {"data_starved", "gpu_underutilized", "memory_high"}
    assert "num_workers" in flags["data_starved"]["recommendation"]
    assert "checkpointing" in flags["memory_high"]["recommendation"]
    assert diagnose(0.0, None, 10, None) == []  # CPU: no utilization, no capacity check
