"""Search filters over names a user chose: a quote in a model name stays inside its string."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from components.common.registry_read import filter_literal
from components.register.stage import find_version

NAMES = ("it's", "it", "s", "it\\'s")


@pytest.fixture
def client(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return MlflowClient(uri, uri)


def test_a_model_version_is_found_by_a_name_holding_a_quote_and_only_it(client):
    for name in NAMES:
        client.create_registered_model(name)
        client.create_model_version(name, "file:///nowhere", tags={"dailyrec_key": "k1"})
    for name in NAMES:
        assert find_version(client, name, "k1").name == name
    assert find_version(client, "it's", "k2") is None


def test_evaluations_of_a_model_are_told_apart_by_a_quoted_name(client):
    experiment = client.create_experiment("e")
    runs = {}
    for name in NAMES:
        run = client.create_run(experiment, tags={"model_name": name})
        client.set_terminated(run.info.run_id)
        runs[name] = run.info.run_id
    for name in NAMES:
        found = client.search_runs(
            [experiment], filter_string="tags.model_name = " + filter_literal(name)
        )
        assert [r.info.run_id for r in found] == [runs[name]]


def test_a_name_with_both_quotes_is_refused_before_anything_runs(tmp_path):
    from components.evaluate.config import EvaluateConfig
    from components.register.config import RegisterConfig

    name = 'it\'s "x"'
    with pytest.raises(ValueError, match="both kinds of quote"):
        filter_literal(name)
    with pytest.raises(ValueError, match="model_name"):
        EvaluateConfig(data="d", checkpoint="c", out="o", model_name=name)
    with pytest.raises(ValueError, match="model_name"):
        RegisterConfig(checkpoint="c", metrics="m", decision="d", model_name=name)
