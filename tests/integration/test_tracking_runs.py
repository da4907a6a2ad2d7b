"""MLflow runs end with the status of what happened: a crashed training run is FAILED, not FINISHED."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from components.common.plan import TrainPlan, write_plan
from components.common.tracking import sqlite_uri
from components.train import trainer
from components.train.trainer import TrainConfig, train

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "crash, status",
    [(RuntimeError("validation died"), "FAILED"), (KeyboardInterrupt("stopped"), "KILLED")],
)
def test_a_crashed_training_run_is_closed_with_its_failure(
    tiny_dataset, tmp_path, monkeypatch, crash, status
):
    def broken(*args, **kwargs):
        raise crash

    monkeypatch.setattr(trainer, "evaluate", broken)  # the first validation, after an epoch's steps
    plan = write_plan(
        tmp_path / "plan.json",
        TrainPlan(model="debug", micro_batch=512, num_workers=0, max_epochs=1),
    )
    uri = sqlite_uri(tmp_path / "mlruns")
    with pytest.raises(type(crash), match=str(crash.args[0])):
        train(
            TrainConfig(
                data=str(tiny_dataset), out=str(tmp_path / "out"), plan=str(plan), tracking_uri=uri
            )
        )
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("dailyrec-train").experiment_id])
    assert run.info.status == status and run.info.end_time
    import mlflow

    assert mlflow.active_run() is None  # the next run in this process starts clean
