"""What a person finds in MLflow: experiments that open in the machine-learning view, runs named by
stage and day, a learning curve, the dataset each run read."""

from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient

from components.common.dataset_meta import DatasetMeta
from components.common.plan import TrainPlan, write_plan
from components.common.tracking import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    connect,
    ensure_experiment,
    sqlite_uri,
)
from components.train.mlflow_run import LOSS_POINTS_PER_EPOCH, STEP_LOSS
from components.train.trainer import TrainConfig, train

pytestmark = pytest.mark.integration


def test_experiments_open_in_mlflows_machine_learning_view(tmp_path):
    uri = sqlite_uri(tmp_path)
    client = connect(uri)
    made = ensure_experiment(client, "new", uri)
    assert client.get_experiment(made).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    older = client.create_experiment("older")  # as an earlier version made them: no kind
    assert ensure_experiment(client, "older", uri) == older
    assert client.get_experiment(older).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


def test_a_training_run_is_named_by_its_day_with_a_learning_curve_and_its_dataset(
    tiny_dataset, tmp_path
):
    plan = write_plan(
        tmp_path / "plan.json",
        TrainPlan(model="debug", micro_batch=64, num_workers=0, max_epochs=2),
    )
    uri = sqlite_uri(tmp_path / "mlruns")
    out = tmp_path / "out"
    train(TrainConfig(data=str(tiny_dataset), out=str(out), plan=str(plan), tracking_uri=uri))
    summary = json.loads((out / "train_summary.json").read_text())
    meta = DatasetMeta.read(tiny_dataset)
    client = MlflowClient(uri)
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.run_name == f"train-{meta.window.end}"
    curve = client.get_metric_history(run.info.run_id, STEP_LOSS)
    steps = sorted(point.step for point in curve)
    assert len(set(steps)) == len(steps) >= LOSS_POINTS_PER_EPOCH and steps[0] >= 1
    assert all(point.value > 0 for point in curve)
    (given,) = run.inputs.dataset_inputs
    assert given.dataset.name == tiny_dataset.name
    assert given.dataset.digest == meta.fingerprint[:16]
    assert {t.key: t.value for t in given.tags}["mlflow.data.context"] == "training"


def test_a_dataset_input_is_made_without_a_warning(tiny_dataset):
    """Every run logs one: a warning there would reach every run's console."""
    import warnings

    from components.common.tracking import dataset_input

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        given = dataset_input(str(tiny_dataset), "ab" * 20)
    assert given.source.to_dict() == {"uri": str(tiny_dataset.resolve())}
    assert given.digest == "ab" * 8


def test_the_by_day_plot_reads_each_days_latest_finished_evaluation(tmp_path):
    import mlflow

    from components.evaluate.stage import DAY_TAG, by_day

    uri = sqlite_uri(tmp_path)
    client = connect(uri)
    experiment = ensure_experiment(client, "evaluate", uri)
    mlflow.set_tracking_uri(uri)

    def evaluation(day, auc, status="FINISHED", model="dailyrec"):
        run = client.create_run(experiment, tags={DAY_TAG: day, "model_name": model})
        client.log_metric(run.info.run_id, "test_auc", auc)
        client.log_metric(run.info.run_id, "champion_auc", auc - 0.01)
        client.log_metric(run.info.run_id, "train_time_ratio", 1.05)
        client.set_terminated(run.info.run_id, status)
        return run

    evaluation("2026-01-05", 0.70)
    evaluation("2026-01-06", 0.60)  # re-run of the day below: the later one counts
    evaluation("2026-01-06", 0.71)
    evaluation("2026-01-07", 0.50, status="FAILED")  # never finished: not a day's result
    evaluation("2026-01-07", 0.50, model="other")  # another model's
    evaluation("not-a-day", 0.50)  # evaluated outside the daily pipeline
    current = client.create_run(experiment, tags={DAY_TAG: "2026-01-08", "model_name": "dailyrec"})
    rows = by_day(current, "dailyrec", "2026-01-08", {"test_auc": 0.72, "blessed": 1.0})
    assert [(r["day"], r["test_auc"]) for r in rows] == [
        ("2026-01-05", 0.70),
        ("2026-01-06", 0.71),
        ("2026-01-08", 0.72),
    ]
    assert rows[0]["champion_auc"] == pytest.approx(0.69) and rows[0]["time_ratio"] == 1.05
    assert rows[-1]["blessed"] and not rows[0]["blessed"] and rows[-1]["champion_auc"] is None
    assert by_day(None, "dailyrec", "2026-01-08", {"test_auc": 0.72})[0]["day"] == "2026-01-08"
