"""Rank 0's progress in the TrainJob's own status: the body the Trainer 2.3 CRD accepts, posted
to an HTTPS endpoint the way the controller offers it (URL, CA file, rotating token file),
throttled, never in a step's way, and from a real training."""

from __future__ import annotations

import datetime as dt

import pytest

from components.common.plan import TrainPlan, write_plan
from components.train import trainjob_status as ts
from components.train.backend import LaunchSpec
from components.train.trainer import TrainConfig, train
from kube.trainjob import build_trainjob
from kube.types import TrainJobTarget
from kube.validate import crd_schemas, validate_objects
from tests.trainer_endpoint import trainer_endpoint

pytestmark = pytest.mark.integration


def _job(tmp_path, status: dict) -> dict:
    plan = write_plan(tmp_path / "plan.json", TrainPlan(nproc_per_node=1))
    spec = LaunchSpec.of(data="/d", out=str(tmp_path / "t"), plan=str(plan))
    job = build_trainjob(spec, TrainPlan(nproc_per_node=1), TrainJobTarget(image="reg/t:1"))
    return job | {"status": {"trainerStatus": status}}


def test_the_status_body_is_what_the_trainer_crd_accepts(tmp_path):
    schemas = crd_schemas()  # manifests/schemas/crds: Kubeflow Trainer 2.3.0
    body = ts.trainer_status(
        0.4567,
        1234.4,
        {"loss": 0.2712345678, "val_auc": 0.7612, "epoch": 2, "nan": float("nan")},
        now=dt.datetime(2026, 12, 7, 3, 0, 0, 123456, tzinfo=dt.UTC),
    )
    assert body == {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 1234,
        "metrics": [
            {"name": "loss", "value": "0.271235"},
            {"name": "val_auc", "value": "0.7612"},
            {"name": "epoch", "value": "2"},
        ],
        "lastUpdatedTime": "2026-12-07T03:00:00Z",
    }
    assert validate_objects([_job(tmp_path, body)], schemas) == ([], [])
    for broken, words in (
        ({**body, "progressPercentage": 150}, "progressPercentage"),
        ({k: v for k, v in body.items() if k != "lastUpdatedTime"}, "lastUpdatedTime is required"),
    ):
        problems, _ = validate_objects([_job(tmp_path, broken)], schemas)
        assert problems and words in " ".join(problems), problems
    # bounds the CRD sets: 0..100, int32 seconds, never negative
    assert ts.trainer_status(1.7, -5, {})["progressPercentage"] == 100
    assert ts.trainer_status(1.0, -5, {})["estimatedRemainingSeconds"] == 0


def test_posts_are_throttled_and_inert_outside_a_trainjob():
    assert not ts.TrainJobStatus(environ={}).enabled
    ts.TrainJobStatus(environ={}).update(0.5, 10)  # nothing to post to: nothing happens
    posted, now = [], [0.0]
    reporter = ts.TrainJobStatus(post=posted.append, clock=lambda: now[0])
    for second in range(13):
        now[0] = float(second)
        reporter.update(second / 20, 100 - second, loss=1.0 / (second + 1))
        if reporter._thread:
            reporter._thread.join()
    assert [p["trainerStatus"]["progressPercentage"] for p in posted] == [0, 25, 50]
    reporter.update(1.0, 0.0, force=True)  # the end is always said
    assert posted[-1]["trainerStatus"]["progressPercentage"] == 100
    assert {"name": "loss", "value": f"{1 / 13:.6g}"} in posted[-1]["trainerStatus"]["metrics"]


def _failing(_):
    raise TimeoutError("the controller did not answer")


def test_a_failing_endpoint_is_said_once_and_never_raised(caplog):
    reporter = ts.TrainJobStatus(post=_failing)
    reporter.update(0.1, 5, force=True)
    reporter.update(0.2, 4, force=True)
    assert reporter.failed
    assert sum("TrainJob status not updated" in r.message for r in caplog.records) == 1


@pytest.fixture
def controller(tmp_path):
    """An HTTPS endpoint as the Trainer controller offers it (tests/trainer_endpoint.py)."""
    with trainer_endpoint(tmp_path) as offered:
        yield offered


def test_posts_reach_an_https_endpoint_with_the_current_token(controller):
    env, token, received = controller
    reporter = ts.TrainJobStatus(environ=env)
    reporter.update(0.25, 30, force=True, loss=0.5)
    token.write_text("rotated-token\n")  # projected tokens rotate: re-read each time
    reporter.update(0.5, 20, force=True)
    assert not reporter.failed
    assert [auth for auth, _ in received] == ["Bearer first-token", "Bearer rotated-token"]
    assert received[-1][1]["trainerStatus"]["progressPercentage"] == 50


def test_a_real_training_reports_its_progress_to_the_trainjob(
    controller, tiny_dataset, tmp_path, monkeypatch
):
    env, _, received = controller
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ts, "EVERY_S", 0.2)
    plan = write_plan(
        tmp_path / "plan.json",
        TrainPlan(
            model="debug", micro_batch=256, num_workers=0, lr=3e-3, eval_batch=4096, max_epochs=2
        ),
    )
    summary = train(TrainConfig(data=str(tiny_dataset), out=str(tmp_path / "out"), plan=str(plan)))
    statuses = [body["trainerStatus"] for _, body in received]
    assert len(statuses) >= 3, statuses
    progress = [s["progressPercentage"] for s in statuses]
    assert progress == sorted(progress) and progress[-1] == 100
    assert statuses[-1]["estimatedRemainingSeconds"] == 0
    names = {m["name"] for s in statuses for m in s["metrics"]}
    assert {"loss", "val_auc", "epoch"} <= names
    last = {m["name"]: m["value"] for m in statuses[-1]["metrics"]}
    assert float(last["val_auc"]) == pytest.approx(summary.history[-1]["val_auc"], abs=1e-5)
