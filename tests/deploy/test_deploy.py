"""make deploy: the dry run (everything it would apply or send, validated), and the KFP calls it makes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from pipelines.deploy import (
    DeployConfig,
    DeployError,
    Publisher,
    deploy,
    image_refs,
    recurring_run_request,
)

ROOT = Path(__file__).resolve().parents[2]
needs_kubectl = pytest.mark.usefixtures("kubectl")
"""The dry run renders the kustomize overlays with kubectl (tests/deploy/conftest.py)."""


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("deploy")
    record = deploy(DeployConfig(env="a100", registry="reg.example/ml", tag="abc123", dry_run=True, out=str(out)))
    return out, record


@needs_kubectl
def test_dry_run_writes_and_validates_everything(dry_run):
    out, record = dry_run
    for name in ("manifests.yaml", "pipeline.yaml", "trainjob-example.yaml", "recurring-run.json",
                 "upload.json", "deploy.json", "katib-experiment.yaml"):
        assert (out / name).stat().st_size > 0, name
    assert record["validation"]["problems"] == []
    assert [s["step"] for s in record["steps"]] == ["images", "manifests"]  # nothing applied or sent
    assert record["steps"][0]["skipped"] and record["steps"][0]["command"][-3:] == ["reg.example/ml", "abc123",
                                                                                    "--push"]


@needs_kubectl
def test_dry_run_pins_the_pushed_images_everywhere(dry_run):
    out, _ = dry_run
    refs = image_refs("reg.example/ml", "abc123")
    images = {c["image"] for obj in yaml.safe_load_all((out / "manifests.yaml").read_text()) if obj
              for c in _containers(obj)}
    dailyrec = {i for i in images if "dailyrec" in i}
    assert dailyrec and dailyrec <= set(refs.values())
    spec, _platform = yaml.safe_load_all((out / "pipeline.yaml").read_text())
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {refs["runtime"]}
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["launcher"]["defaultValue"] == "trainjob"
    target = json.loads(params["cluster_target"]["defaultValue"])
    assert target["trainjob"]["image"] == refs["trainer"] and target["trainjob"]["accelerator"] == "nvidia.com/gpu"
    job = yaml.safe_load((out / "trainjob-example.yaml").read_text())
    assert job["spec"]["trainer"]["image"] == refs["trainer"]
    assert job["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "8"}


@needs_kubectl
def test_dry_run_recurring_run_request(dry_run):
    out, _ = dry_run
    request = json.loads((out / "recurring-run.json").read_text())
    assert request["cron_expression"] == "0 0 2 * * *" and len(request["cron_expression"].split()) == 6
    assert request["max_concurrency"] == 1 and request["no_catchup"] is True
    assert request["job_name"] == "dailyrec-daily" and request["pipeline_version"] == "abc123"


def _containers(node):
    if isinstance(node, dict):
        if "image" in node and "name" in node:
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def test_config_errors_are_clear():
    with pytest.raises(DeployError, match="no manifests/overlays/moon"):
        DeployConfig(env="moon", registry="r", dry_run=True)
    with pytest.raises(DeployError, match="KFP_HOST is required"):
        DeployConfig(env="a100", registry="r")
    with pytest.raises(DeployError, match="REGISTRY is required"):
        DeployConfig(env="a100", registry="", dry_run=True)
    with pytest.raises(DeployError, match="6 fields"):
        DeployConfig(env="a100", registry="r", dry_run=True, schedule="0 2 * * *")


class RecordingClient:
    """Stands in for kfp.Client (no server here): records every call, answers like the API."""

    def __init__(self, versions=(), recurring=()):
        self.calls = []
        self.versions = list(versions)
        self.recurring = list(recurring)

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return self.answer(name, args, kwargs)
        return call

    def answer(self, name, args, kwargs):
        ns = SimpleNamespace
        return {
            "get_pipeline_id": "pid",
            "list_pipeline_versions": ns(pipeline_versions=[ns(display_name=v, pipeline_version_id=f"vid-{v}")
                                                            for v in self.versions]),
            "upload_pipeline_version": ns(pipeline_version_id="vid-new"),
            "get_experiment": ns(experiment_id="eid"),
            "list_recurring_runs": ns(recurring_runs=[ns(display_name=n, recurring_run_id=f"rid-{n}")
                                                      for n in self.recurring]),
            "create_recurring_run": ns(recurring_run_id="rid-created"),
            "run_pipeline": ns(run_id="run-1"),
        }.get(name)

    def names(self):
        return [c[0] for c in self.calls]


def test_publisher_uploads_a_version_once(tmp_path):
    fresh = RecordingClient(versions=["old"])
    assert Publisher(fresh).pipeline_version(tmp_path / "p.yaml", "abc") == ("pid", "vid-new", True)
    (_, args, kwargs), = [c for c in fresh.calls if c[0] == "upload_pipeline_version"]
    assert kwargs == {"pipeline_version_name": "abc", "pipeline_id": "pid"}
    again = RecordingClient(versions=["abc"])
    assert Publisher(again).pipeline_version(tmp_path / "p.yaml", "abc") == ("pid", "vid-abc", False)
    assert "upload_pipeline_version" not in again.names()


def test_publisher_replaces_the_recurring_run(tmp_path):
    client = RecordingClient(recurring=["dailyrec-daily", "someone-elses"])
    rid = Publisher(client).replace_recurring_run(recurring_run_request("abc", "0 0 2 * * *"), "pid", "vid")
    assert rid == "rid-created"
    deletes = [c[1] for c in client.calls if c[0] == "delete_recurring_run"]
    assert deletes == [("rid-dailyrec-daily",)]
    (_, _, kwargs), = [c for c in client.calls if c[0] == "create_recurring_run"]
    assert kwargs["cron_expression"] == "0 0 2 * * *" and kwargs["max_concurrency"] == 1
    assert kwargs["no_catchup"] is True and kwargs["pipeline_id"] == "pid" and kwargs["version_id"] == "vid"
    assert kwargs["experiment_id"] == "eid" and kwargs["job_name"] == "dailyrec-daily"
    assert client.names().index("delete_recurring_run") < client.names().index("create_recurring_run")


def test_trigger_starts_the_newest_version_with_parameters():
    client = RecordingClient(versions=["newest", "older"])
    assert Publisher(client).trigger({"run_date": "2026-01-14"}) == "run-1"
    (_, args, kwargs), = [c for c in client.calls if c[0] == "run_pipeline"]
    assert args[0] == "eid" and args[1].startswith("dailyrec-daily-")
    assert kwargs == {"params": {"run_date": "2026-01-14"}, "pipeline_id": "pid", "version_id": "vid-newest"}
