"""Evaluate + register against a real MLflow registry (SQLite in a temp folder)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import sys

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from sklearn.metrics import roc_auc_score

from components.common.cli import Exit
from components.common.dataset import DatasetError
from components.common.dataset_meta import DatasetMeta
from components.common.evaluation import Decision
from components.common.plan import TrainPlan, write_plan
from components.common.registry import KEY_TAG
from components.common.tracking import TrackingError, sqlite_uri
from components.evaluate.decision import GateRule
from components.evaluate.stage import EvaluateConfig, EvaluateError, evaluate
from components.register.config import RegisterConfig
from components.register.stage import register
from components.train.checkpoint import CheckpointError
from components.train.inference import split_rows
from components.train.model import Vocab
from components.train.trainer import TrainConfig, train
from tests.checkpoints import earlier_window, untrained_checkpoint
from tests.evaluations import forced_evaluation

pytestmark = pytest.mark.integration
NAME = "ctr"


@pytest.fixture(scope="module")
def trained(tiny_dataset, tmp_path_factory):
    """A checkpoint trained 3 epochs on the tiny dataset."""
    root = tmp_path_factory.mktemp("trained")
    plan = write_plan(
        root / "plan.json",
        TrainPlan(
            model="debug", micro_batch=512, num_workers=0, lr=3e-3, eval_batch=4096, max_epochs=3
        ),
    )
    train(TrainConfig(data=str(tiny_dataset), out=str(root / "out"), plan=str(plan)))
    return root / "out" / "best.pt"


class Registry:
    """evaluate -> register, as the pipeline chains them, on one SQLite registry."""

    def __init__(self, data, root):
        self.data, self.root, self.uri, self.n = data, root, sqlite_uri(root / "mlruns"), 0
        self.client = None

    def evaluate(self, checkpoint, **rule):
        self.n += 1
        out = self.root / f"eval-{self.n}"
        result = evaluate(
            EvaluateConfig(
                data=str(self.data),
                checkpoint=str(checkpoint),
                out=str(out),
                model_name=NAME,
                tracking_uri=self.uri,
                rule=GateRule(**({"min_auc": 0.0} | rule)),
            )
        )
        return result, out

    def register(self, checkpoint, out, **extra):
        return register(
            RegisterConfig(
                checkpoint=str(checkpoint),
                metrics=str(out / "metrics.json"),
                decision=str(out / "decision.json"),
                model_name=NAME,
                tracking_uri=self.uri,
                **({"data": str(self.data)} | extra),
            )
        )

    def cycle(self, checkpoint, rule=None, **extra):
        result, out = self.evaluate(checkpoint, **(rule or {}))
        return result, self.register(checkpoint, out, **extra)

    def aliases(self):
        self.client = self.client or MlflowClient(self.uri, registry_uri=self.uri)
        return {
            alias: int(v) for alias, v in self.client.get_registered_model(NAME).aliases.items()
        }

    def versions(self):
        self.client = self.client or MlflowClient(self.uri, registry_uri=self.uri)
        return self.client.search_model_versions(f"name = '{NAME}'")


@pytest.fixture
def registry(tiny_dataset, tmp_path):
    return Registry(tiny_dataset, tmp_path)


def test_outputs_and_metrics_match_direct_computation(registry, trained, tiny_dataset):
    result, out = registry.evaluate(trained)
    for name in (
        "metrics.json",
        "decision.json",
        "roc.json",
        "report.md",
        "roc.png",
        "calibration.png",
    ):
        assert (out / name).stat().st_size > 0, name
    metrics = json.loads((out / "metrics.json").read_text())
    decision = Decision.read(out)
    assert decision.blessed and decision.champion_status == "none"
    # the candidate's AUC is scikit-learn's on the same rows, scored independently here
    from components.train.inference import load_scorer, predict_logits

    meta = DatasetMeta.read(tiny_dataset)
    (batch,) = split_rows(tiny_dataset, "test", meta, 10**6)
    scores = predict_logits(load_scorer(trained).model, [batch])
    assert metrics["test_auc"] == pytest.approx(roc_auc_score(batch["label"], scores), abs=1e-9)
    assert metrics["candidate"]["rows"] == meta.splits["test"].rows == len(scores)
    assert metrics["candidate"]["positive_rate"] == pytest.approx(meta.splits["test"].positive_rate)
    roc = json.loads((out / "roc.json").read_text())["candidate"]
    assert roc[0]["fpr"] == 0 and roc[-1]["fpr"] == roc[-1]["tpr"] == 1
    assert "BLESSED" in (out / "report.md").read_text()
    assert (out / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_champion_lifecycle(registry, trained, tiny_dataset, tmp_path):
    # yesterday's model: the next day's champion makes it @previous (a day run again would not)
    weak = untrained_checkpoint(
        tmp_path / "weak.pt", tiny_dataset, seed=1, window=earlier_window(tiny_dataset)
    )
    # 1. the first registration becomes champion
    result, reg = registry.cycle(weak)
    assert result.decision.blessed and reg.version == 1
    assert registry.aliases() == {"champion": 1}
    # 2. a better model is compared with it, blessed, and moves champion; the old one is previous
    result, reg = registry.cycle(trained)
    comparison = result.metrics.comparison
    assert result.decision.champion_version == 1 and comparison["delta"] > 0
    # the gate compares the models as served; the dataset's features give the other comparison
    assert comparison["auc_b"] == result.metrics.champion["served_auc"]
    on_dataset = result.metrics.comparison_on_dataset_features
    assert on_dataset["auc_b"] == pytest.approx(result.metrics.champion["metrics"]["auc"])
    assert on_dataset["auc_a"] == pytest.approx(result.metrics.test_auc)
    assert reg.version == 2 and registry.aliases() == {"champion": 2, "previous": 1}
    # 3. a significantly worse model is not blessed: nothing registered, the champion stays
    worse = untrained_checkpoint(tmp_path / "worse.pt", tiny_dataset, seed=2)
    result, reg = registry.cycle(worse)
    assert not result.decision.blessed
    assert result.metrics.comparison["ci_high"] < -0.002
    assert "significantly worse" in " ".join(result.decision.reasons)
    assert not reg.registered and registry.aliases() == {"champion": 2, "previous": 1}
    # ... unless asked: then it is registered as challenger, champion untouched
    reg = registry.register(worse, registry.root / f"eval-{registry.n}", register_unblessed=True)
    assert reg.version == 3 and registry.aliases() == {
        "champion": 2,
        "previous": 1,
        "challenger": 3,
    }
    # 4. the same output registered again: no new version
    again = registry.register(trained, registry.root / "eval-2")
    assert again.reused and again.version == 2 and len(registry.versions()) == 3
    tags = {int(mv.version): mv.tags for mv in registry.versions()}
    assert tags[2]["blessed"] == "true" and len(tags[2]["dataset"]) == 12
    assert float(tags[2]["test_auc"]) == pytest.approx(
        registry_auc(registry.root / "eval-2"),
        abs=5e-5,  # four decimals: a tag to read
    )
    assert tags[2]["plan"].endswith("epochs") and tags[2]["model"] == "debug" and tags[2]["code"]
    # 5. rolling back puts the previous champion back; rolling back again undoes it
    from components.register.rollback import main as rollback_main

    assert rollback_main(["--model-name", NAME, "--tracking-uri", registry.uri]) == 0
    assert registry.aliases() == {"champion": 1, "previous": 2, "challenger": 3}
    assert rollback_main(["--model-name", NAME, "--tracking-uri", registry.uri]) == 0
    assert registry.aliases() == {"champion": 2, "previous": 1, "challenger": 3}
    assert (
        rollback_main(["--model-name", NAME, "--tracking-uri", registry.uri, "--to-version", "9"])
        == 1
    )


def registry_auc(out):
    return json.loads((out / "metrics.json").read_text())["test_auc"]


def test_a_model_of_constant_scores_is_refused_whatever_the_floor(registry, tiny_dataset, tmp_path):
    """Its served AUC is 0.5 by construction, which clears a floor of 0.5 (configs/debug.json)."""
    flat = untrained_checkpoint(tmp_path / "flat.pt", tiny_dataset, seed=1, constant=True)
    result, out = registry.evaluate(flat, min_auc=0.5)
    assert result.metrics.served["score_spread"]["distinct"] == 1
    assert not result.decision.blessed
    assert "constant scores" in result.decision.reasons[0]
    assert json.loads((out / "decision.json").read_text())["blessed"] is False


def test_champion_loads_with_pyfunc_and_refuses_bad_requests(registry, trained, tiny_dataset):
    registry.cycle(trained)
    model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    raw = pd.read_parquet(next((tiny_dataset.parent / "raw").glob("dt=*/*.parquet")))
    requests = raw[["user_id", "item_id", "category_id", "timestamp"]].head(50)
    from components.score.protocol import BadRequest

    # a row of the window itself: its user's state already holds what came after it
    with pytest.raises(BadRequest, match="^row 0: timestamp .* is not after its user's last event"):
        model.predict(requests)
    later = int(raw["timestamp"].max()) + 5 * 86_400  # epoch seconds
    requests = requests.assign(timestamp=later)  # what serving scores: after the window
    prob = model.predict(requests)  # raw ids; each user's state from the version's snapshot
    assert prob.dtype == np.float32 and prob.shape == (50,) and np.all((prob > 0) & (prob < 1))

    with pytest.raises(BadRequest, match="^row 0: item_id 0.5 is no usable id"):
        model.predict(requests.head(2).assign(item_id=[0.5, 1]))


@pytest.mark.parametrize("crash_in", ["create_model_version", "set_registered_model_alias"])
def test_interrupted_registration_completes_on_rerun(registry, trained, monkeypatch, crash_in):
    original = getattr(MlflowClient, crash_in)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed")  # not an Exception: nothing may swallow it

    _, out = registry.evaluate(trained)
    monkeypatch.setattr(MlflowClient, crash_in, crash)
    with pytest.raises(KeyboardInterrupt, match="^killed$"):
        registry.register(trained, out)
    monkeypatch.setattr(MlflowClient, crash_in, original)
    reg = registry.register(trained, out)
    assert reg.version == 1 and len(registry.versions()) == 1
    assert registry.aliases() == {"champion": 1}
    logged = mlflow.search_logged_models(
        output_format="list",
        filter_string=f"tags.{KEY_TAG} = '{reg.key}'",
        experiment_ids=[registry.client.get_experiment_by_name("dailyrec-register").experiment_id],
    )
    assert len(logged) == 1  # the model logged before the crash was reused, not logged twice


def test_unusable_champion_is_reported_and_blocks_by_default(
    registry, trained, tiny_dataset, tmp_path
):
    other = Vocab(
        **{**dataclasses.asdict(Vocab.from_meta(DatasetMeta.read(tiny_dataset))), "item": 4096}
    )
    foreign = untrained_checkpoint(
        tmp_path / "foreign.pt", tiny_dataset, 3, vocab=other, window=earlier_window(tiny_dataset)
    )  # yesterday's
    registry.register(foreign, forced_evaluation(tmp_path / "d"))
    result, reg = registry.cycle(trained)
    assert result.decision.champion_status == "unusable" and not result.decision.blessed
    assert "item: model 4096 vs data 2048" in " ".join(result.decision.reasons)
    assert not reg.registered and registry.aliases() == {"champion": 1}
    result, reg = registry.cycle(trained, rule={"if_champion_unusable": "ignore"})
    assert result.decision.blessed and registry.aliases() == {"champion": 2, "previous": 1}


def test_clear_errors(registry, trained, tiny_dataset, tmp_path):
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(trained.read_bytes()[:2000])
    with pytest.raises(CheckpointError, match="truncated.pt"):
        registry.evaluate(truncated)
    _, out = registry.evaluate(trained)
    with pytest.raises(CheckpointError, match="truncated.pt"):
        registry.register(truncated, out)
    other = tmp_path / "other-schema"
    shutil.copytree(tiny_dataset, other)
    meta = json.loads((other / "meta.json").read_text())
    (other / "meta.json").write_text(json.dumps(meta | {"schema_version": 99}))
    with pytest.raises(DatasetError, match="schema_version 99 is not supported"):
        evaluate(EvaluateConfig(data=str(other), checkpoint=str(trained), out=str(tmp_path / "e")))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = f"http://127.0.0.1:{port}"
    with pytest.raises(TrackingError, match=f"127.0.0.1:{port} unusable after 3 attempts"):
        evaluate(
            EvaluateConfig(
                data=str(tiny_dataset),
                checkpoint=str(trained),
                out=str(tmp_path / "e"),
                tracking_uri=dead,
            )
        )
    with pytest.raises(TrackingError, match="unusable"):
        register(
            RegisterConfig(
                checkpoint=str(trained),
                metrics=str(out / "metrics.json"),
                decision=str(out / "decision.json"),
                tracking_uri=dead,
            )
        )
    assert not (tmp_path / "e").exists()  # nothing half-written


def test_candidate_for_other_buckets_is_refused(registry, tiny_dataset, tmp_path):
    other = Vocab(
        **{**dataclasses.asdict(Vocab.from_meta(DatasetMeta.read(tiny_dataset))), "user": 64}
    )
    with pytest.raises(EvaluateError, match="user: model 64 vs data 1024"):
        registry.evaluate(
            untrained_checkpoint(tmp_path / "c.pt", tiny_dataset, seed=0, vocab=other)
        )


def test_clis_exit_codes(registry, trained, tiny_dataset, tmp_path, capsys):
    out = tmp_path / "cli-eval"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.evaluate",
            "--data",
            str(tiny_dataset),
            "--checkpoint",
            str(trained),
            "--model-name",
            NAME,
            "--out",
            str(out),
            "--tracking-uri",
            registry.uri,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "BLESSED" in done.stdout
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.register",
            "--checkpoint",
            str(trained),
            "--metrics",
            str(out / "metrics.json"),
            "--decision",
            str(out / "decision.json"),
            "--model-name",
            NAME,
            "--tracking-uri",
            registry.uri,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "version 1" in done.stdout
        and json.loads((out / "registration.json").read_text())["version"] == 1
    )
    from components.evaluate.__main__ import main as evaluate_main

    capsys.readouterr()
    assert (
        evaluate_main(
            [
                "--data",
                str(tiny_dataset),
                "--checkpoint",
                str(tmp_path / "missing.pt"),
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == Exit.USAGE  # a missing checkpoint is bad input
    )
    err = capsys.readouterr().err
    assert (
        err.startswith("evaluate: error:") and "missing.pt" in err and err.strip().count("\n") == 0
    )


def test_a_registry_read_error_after_connecting_fails_the_evaluation(
    registry, tiny_dataset, tmp_path, monkeypatch
):
    """The registry answers the connection check, then fails reading @champion: no verdict at all
    (a "no champion" verdict here would bless any candidate above the floor)."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR

    from components.common.tracking import connect

    candidate = untrained_checkpoint(tmp_path / "c.pt", tiny_dataset, seed=1)
    connect(registry.uri)  # the registry exists (absent, it has no champion to read)

    def locked(self, name):
        raise MlflowException(
            "(sqlite3.OperationalError) database is locked", error_code=INTERNAL_ERROR
        )

    monkeypatch.setattr(MlflowClient, "get_registered_model", locked)
    with pytest.raises(
        TrackingError,
        match=r"cannot read alias ctr@champion: MlflowException: .*database is locked",
    ):
        registry.evaluate(candidate)
    assert not (registry.root / f"eval-{registry.n}").exists()  # no metrics, no decision.json
