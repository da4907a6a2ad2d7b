"""dailyrec against MLflow's own basic-auth server (``mlflow server --app-name basic-auth``): the
accounts set up in the documented order let training, evaluation and registration work under
their own accounts with a version linked to its training run; a lost link is an error."""

from __future__ import annotations

import secrets

import pytest

from components.common.plan import TrainPlan, write_plan
from components.evaluate.decision import GateRule
from components.evaluate.stage import EvaluateConfig, evaluate
from components.register.config import RegisterConfig
from components.register.stage import register
from components.train.trainer import TrainConfig, train
from pipelines import accounts
from tests.reliability.mlflow_server import mlflow_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]  # a real server, minutes: make test-reliability
ADMIN = ("admin", "admin-password-" + secrets.token_hex(8))
PASSWORDS = {"pipeline": secrets.token_hex(12), "trainer": secrets.token_hex(12)}


@pytest.fixture
def auth_server(tmp_path):
    """A real MLflow server with its basic-auth app, nobody allowed anything by default."""
    root = tmp_path / "server"
    root.mkdir()
    ini = root / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\n"
        "default_permission = NO_PERMISSIONS\n"
        f"database_uri = sqlite:///{root / 'auth.db'}\n"
        f"admin_username = {ADMIN[0]}\n"
        f"admin_password = {ADMIN[1]}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    env = {
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
    }
    with (
        open(root / "server.log", "w") as log,
        mlflow_server(
            f"sqlite:///{root / 'mlflow.db'}",
            root / "artifacts",
            ["--app-name", "basic-auth"],
            env,
            log,
            120,
        ) as (uri, _),
    ):
        yield uri


def _as(monkeypatch, user: str, password: str) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


def _set_up(monkeypatch, uri: str, capsys) -> str:
    _as(monkeypatch, *ADMIN)
    for user, variable in accounts.PASSWORD_ENV.items():
        monkeypatch.setenv(variable, PASSWORDS[user])
    assert accounts.main(["--tracking-uri", uri]) == 0
    return capsys.readouterr().out


def _train(data, out, uri: str):
    """One epoch of the debug model, logged to ``uri`` under the current account."""
    plan = write_plan(
        out.parent / "plan.json",
        TrainPlan(
            model="debug", micro_batch=512, num_workers=0, lr=3e-3, eval_batch=4096, max_epochs=1
        ),
    )
    return train(TrainConfig(data=str(data), out=str(out), plan=str(plan), tracking_uri=uri))


def _evaluate(data, trained, evaluated, uri: str):
    """The trained checkpoint evaluated (any AUC blessed), logged to ``uri``; its folder."""
    evaluate(
        EvaluateConfig(
            data=str(data),
            checkpoint=str(trained / "best.pt"),
            out=str(evaluated),
            tracking_uri=uri,
            rule=GateRule(min_auc=0.0),
        )
    )
    return evaluated


def test_the_accounts_in_order_let_every_stage_work_under_its_own(
    auth_server, tiny_dataset, tmp_path, monkeypatch, capsys, fault_report
):
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    uri = auth_server
    first = _set_up(monkeypatch, uri, capsys)
    assert "created user pipeline, user trainer, experiment" in first
    assert "pipeline EDIT on dailyrec-train" in first and "trainer EDIT on dailyrec-train" in first
    again = _set_up(monkeypatch, uri, capsys)  # idempotent: nothing more to create
    assert "created nothing (all there)" in again

    # the training pods' account trains and logs its run
    _as(monkeypatch, "trainer", PASSWORDS["trainer"])
    out = tmp_path / "train"
    summary = _train(tiny_dataset, out, uri)
    assert summary.mlflow_run_id and summary.tracking_error is None
    # ...and can never register a model or move an alias
    with pytest.raises(MlflowException, match="403|PERMISSION_DENIED|Permission denied"):
        MlflowClient(uri, registry_uri=uri).set_registered_model_alias(
            RegisterConfig.model_name, "champion", "1"
        )

    # the pipeline's account evaluates and registers, the version linked to the training run
    _as(monkeypatch, "pipeline", PASSWORDS["pipeline"])
    evaluated = _evaluate(tiny_dataset, out, tmp_path / "eval", uri)
    registration = register(
        RegisterConfig(
            checkpoint=str(out / "best.pt"),
            metrics=str(evaluated / "metrics.json"),
            decision=str(evaluated / "decision.json"),
            tracking_uri=uri,
            data=str(tiny_dataset),
        )
    )
    assert registration.version == 1
    version = MlflowClient(uri, registry_uri=uri).get_model_version(RegisterConfig.model_name, "1")
    assert f"runs/{summary.mlflow_run_id}" in version.description  # linked to its training run
    fault_report(
        "security",
        "MLflow's basic-auth server: accounts set up by pipelines.accounts, then train, evaluate "
        "and register each under its own account",
        "every stage works; the trainer's account gets 403 on moving @champion; the version "
        "links its training run",
    )


def test_a_training_run_the_pipeline_cannot_read_is_an_error_not_a_lost_link(
    auth_server, tiny_dataset, tmp_path, monkeypatch, capsys, fault_report
):
    """Without access to the training experiment (the order the first run would make), register
    stops in one line naming the run and what to grant, instead of a version without its link."""
    from mlflow.server import get_app_client

    from components.register.__main__ import main as register_main

    uri = auth_server
    _set_up(monkeypatch, uri, capsys)
    _as(monkeypatch, "trainer", PASSWORDS["trainer"])
    out = tmp_path / "train"
    summary = _train(tiny_dataset, out, uri)
    _as(monkeypatch, *ADMIN)
    train_experiment = get_app_client("basic-auth", tracking_uri=uri)
    from mlflow import MlflowClient

    experiment = MlflowClient(uri).get_experiment_by_name(accounts.TRAIN).experiment_id
    train_experiment.revoke_user_permission("pipeline", "experiment", experiment)
    _as(monkeypatch, "pipeline", PASSWORDS["pipeline"])
    evaluated = _evaluate(tiny_dataset, out, tmp_path / "eval", uri)
    code = register_main(
        [
            "--checkpoint",
            str(out / "best.pt"),
            "--metrics",
            str(evaluated / "metrics.json"),
            "--decision",
            str(evaluated / "decision.json"),
            "--tracking-uri",
            uri,
            "--data",
            str(tiny_dataset),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    (line,) = [x for x in err.splitlines() if x.startswith("register: error:")]
    assert f"the training run {summary.mlflow_run_id} cannot be read" in line
    assert "EDIT" in line and "Traceback" not in err
    fault_report(
        "security",
        "the pipeline's account loses access to the training experiment, then registers",
        "refused in one line naming the training run and the grant it needs; nothing registered "
        "without its link",
    )
