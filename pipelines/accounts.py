"""MLflow's accounts for dailyrec on a server with basic auth, set up in an order that works.

``python -m pipelines.accounts --tracking-uri URI``, run once (and again at will: it
only adds what is missing) as MLflow's admin (``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` in the
environment). The accounts' passwords come from ``DAILYREC_PIPELINE_PASSWORD`` and
``DAILYREC_TRAINER_PASSWORD``, never from the command line.

Why this order: MLflow grants name experiments and models that must exist, and whoever creates an
experiment is its only manager. Left to the first run, the training pods' account creates
``dailyrec-train`` and the pipeline's account cannot read the training runs (403): every model
version would lose its link to them. So the admin creates every experiment and the registered
model first, then grants (:data:`GRANTS`):

* ``pipeline`` (train, evaluate, register and tune tasks): EDIT on every experiment: it reads the
  training runs and logs each model on its training run (a logged model's home), and writes its
  own runs, MANAGE on the registered model (versions, ``@champion``, ``@previous``);
* ``trainer`` (the training pods): EDIT on the training and tuning experiments only, so a
  training pod logs its metrics but can never register a model or move an alias.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from components.common.cli import Exit, cli_parser, exit_for
from components.common.tracking import TrackingError, connect, ensure_experiment, redact
from components.evaluate.config import EXPERIMENT as EVALUATE_EXPERIMENT
from components.register.config import RegisterConfig
from components.train.config import TrainConfig
from components.tune.config import TuneConfig

PASSWORD_ENV = {"pipeline": "DAILYREC_PIPELINE_PASSWORD", "trainer": "DAILYREC_TRAINER_PASSWORD"}
"""Where each account's password is read from (created accounts only; existing ones keep theirs)."""
TRAIN, TUNE = TrainConfig.experiment, TuneConfig.experiment
GRANTS: dict[str, dict[str, str]] = {
    "pipeline": {
        TRAIN: "EDIT",
        TUNE: "EDIT",
        EVALUATE_EXPERIMENT: "EDIT",
        RegisterConfig.experiment: "EDIT",
    },
    "trainer": {TRAIN: "EDIT", TUNE: "EDIT"},
}
"""Per account: the experiments it may use, and how."""
MODEL_PERMISSION = {"pipeline": "MANAGE"}
"""Per account: its permission on the registered model."""


class AccountsError(RuntimeError):
    """The accounts could not be set up (the message says which step and why)."""


@dataclass(frozen=True)
class Done:
    """What a setup did: accounts, experiments and the model created, grants given."""

    created: tuple[str, ...]
    granted: tuple[str, ...]

    def line(self) -> str:
        made = ", ".join(self.created) or "nothing (all there)"
        return f"accounts: created {made}; granted {', '.join(self.granted)}"


def set_up(tracking_uri: str, model_name: str, environ: dict | None = None) -> Done:
    """Create what is missing and grant :data:`GRANTS` and :data:`MODEL_PERMISSION`."""
    from mlflow.exceptions import MlflowException
    from mlflow.server import get_app_client

    env = os.environ if environ is None else environ
    client = connect(tracking_uri)
    auth = get_app_client("basic-auth", tracking_uri=tracking_uri)
    created: list[str] = []
    for user, variable in PASSWORD_ENV.items():
        try:
            auth.get_user(user)
        except MlflowException:
            password = env.get(variable, "")
            if not password:
                raise AccountsError(
                    f"user {user} does not exist: set ${variable} to create it"
                ) from None
            auth.create_user(user, password)
            created.append(f"user {user}")
    experiments = {}
    for name in sorted({e for grants in GRANTS.values() for e in grants}):
        known = client.get_experiment_by_name(name)
        experiments[name] = ensure_experiment(client, name, tracking_uri)
        if known is None:
            created.append(f"experiment {name}")
    try:
        client.get_registered_model(model_name)
    except MlflowException:
        client.create_registered_model(model_name)
        created.append(f"model {model_name}")
    granted = []
    for user, grants in GRANTS.items():
        for name, permission in grants.items():
            _grant(auth, user, "experiment", experiments[name], permission)
            granted.append(f"{user} {permission} on {name}")
    for user, permission in MODEL_PERMISSION.items():
        _grant(auth, user, "registered_model", model_name, permission)
        granted.append(f"{user} {permission} on model {model_name}")
    return Done(tuple(created), tuple(granted))


def _grant(auth, user: str, kind: str, resource: str, permission: str) -> None:
    """Grant ``permission``, replacing whatever the user had there: a rerun, or an experiment the
    user created (MLflow makes its creator MANAGE), ends with exactly :data:`GRANTS`."""
    from mlflow.exceptions import MlflowException

    try:
        auth.grant_user_permission(user, kind, resource, permission)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        auth.revoke_user_permission(user, kind, resource)
        auth.grant_user_permission(user, kind, resource, permission)


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m pipelines.accounts",
        "Set up dailyrec's MLflow accounts and grants on a basic-auth server (as its admin).",
    )
    p.add_argument("--tracking-uri", required=True, help="the MLflow server (http[s]://...)")
    p.add_argument("--model-name", default=RegisterConfig.model_name, help="registered model")
    args = p.parse_args(argv)
    try:
        done = set_up(args.tracking_uri, args.model_name)
    except (AccountsError, TrackingError, ValueError, OSError) as exc:
        print(f"accounts: error: {redact(str(exc))}", file=sys.stderr)
        return exit_for(exc)
    except Exception as exc:  # the server's refusal (not admin, a bad grant): one line
        print(f"accounts: error: {type(exc).__name__}: {redact(str(exc))[:300]}", file=sys.stderr)
        return Exit.FAILED
    print(done.line())
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
