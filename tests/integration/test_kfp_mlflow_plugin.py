"""KFP 2.17's MLflow plugin gives each task a run of its own through the environment its driver
sets (``MLFLOW_RUN_ID``, ``MLFLOW_EXPERIMENT_ID``, ``MLFLOW_TRACKING_URI``); ``mlflow.start_run``
would resume it. Evaluate and register, run with that environment, keep their runs in their own
experiments, leave KFP's run as it was, and name it as their parent on the same server."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from components.common import tracking
from components.evaluate.config import EXPERIMENT
from components.evaluate.decision import GateRule
from components.evaluate.stage import EvaluateConfig, evaluate
from components.register.config import RegisterConfig
from components.register.stage import register
from tests.checkpoints import untrained_checkpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def plugin_env(monkeypatch):
    """The driver's environment for one task, and a fresh look at it by this process."""
    monkeypatch.setattr(tracking, "_injected", [])

    def set_env(run_id: str, experiment_id: str, uri: str) -> None:
        tracking._injected.clear()  # as a task's process starts: nothing taken yet
        monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
        monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment_id)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)

    yield set_env
    tracking._injected.clear()


def _kfp_task_run(uri: str) -> tuple[MlflowClient, str, str]:
    """The run the plugin makes for a task: its own experiment, on the platform's server."""
    client = MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("kfp-pipeline-run")
    run = client.create_run(experiment, run_name="evaluate-op")
    return client, experiment, run.info.run_id


def _evaluate_and_register(data, tmp_path, uri):
    checkpoint = untrained_checkpoint(tmp_path / "c.pt", data, seed=1)
    out = tmp_path / "eval"
    result = evaluate(
        EvaluateConfig(
            data=str(data),
            checkpoint=str(checkpoint),
            out=str(out),
            model_name="ctr",
            tracking_uri=uri,
            rule=GateRule(min_auc=0.0),
        )
    )
    registration = register(
        RegisterConfig(
            checkpoint=str(checkpoint),
            metrics=str(out / "metrics.json"),
            decision=str(out / "decision.json"),
            model_name="ctr",
            tracking_uri=uri,
            data=str(data),
        )
    )
    return result, registration


def test_our_runs_stay_in_our_experiments_and_name_kfps_run_as_parent(
    tiny_dataset, tmp_path, plugin_env
):
    uri = tracking.sqlite_uri(tmp_path / "mlruns")
    tracking.connect(uri)
    client, kfp_experiment, kfp_run = _kfp_task_run(uri)
    plugin_env(kfp_run, kfp_experiment, uri)
    _evaluate_and_register(tiny_dataset, tmp_path, uri)
    for name in (EXPERIMENT, RegisterConfig.experiment):
        experiment = client.get_experiment_by_name(name)
        (run,) = client.search_runs([experiment.experiment_id])
        assert run.data.tags[tracking.PARENT_TAG] == kfp_run, name
        assert run.data.tags[tracking.KFP_RUN_TAG].endswith(f"#{kfp_run}")
        assert run.info.status == "FINISHED"
    untouched = client.get_run(kfp_run)
    assert not untouched.data.params and not untouched.data.metrics
    assert [r.info.run_id for r in client.search_runs([kfp_experiment])] == [kfp_run]


def test_a_plugin_run_on_another_server_is_recorded_not_resumed(tiny_dataset, tmp_path, plugin_env):
    """The platform's MLflow is not ours: its run id means nothing on our server (start_run would
    fail on it); our runs say where it lives and carry no parent that points nowhere."""
    uri = tracking.sqlite_uri(tmp_path / "mlruns")
    platform = tracking.sqlite_uri(tmp_path / "platform")
    tracking.connect(platform)
    _, kfp_experiment, kfp_run = _kfp_task_run(platform)
    plugin_env(kfp_run, kfp_experiment, platform)
    result, registration = _evaluate_and_register(tiny_dataset, tmp_path, uri)
    assert registration.version == 1
    client = MlflowClient(uri, registry_uri=uri)
    run = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])[0]
    assert tracking.PARENT_TAG not in run.data.tags
    assert run.data.tags[tracking.KFP_RUN_TAG] == f"{platform}#{kfp_run}"
