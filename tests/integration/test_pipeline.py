"""The dailyrec-daily pipeline: compiled structure, and whole runs through kfp.local."""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest
import yaml
from mlflow import MlflowClient

from components.common.evaluation import Decision
from components.common.images import RUNTIME_IMAGE
from components.common.registration import Registration
from components.common.run_summary import RunSummary
from components.common.runs import STAGES
from components.common.tracking import sqlite_uri
from components.datagen import generate
from components.datagen.generator import extended
from pipelines.compile import compile_pipeline
from pipelines.local import LocalRunError, load_config, run_local
from pipelines.parameters import DEPLOYMENT
from tests.run_records import SUMMARY_KEYS
from tests.small_run import small_world

# ----------------------------------------------------------------------------- compiled pipeline


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(pipeline spec, Kubernetes platform spec): the two YAML documents of the compiled pipeline."""
    docs = list(
        yaml.safe_load_all(compile_pipeline(tmp_path_factory.mktemp("c") / "p.yaml").read_text())
    )
    assert len(docs) == 2
    return docs[0], docs[1]


@pytest.fixture(scope="module")
def spec(compiled):
    return compiled[0]


def test_every_task_mounts_the_shared_volume(compiled):
    spec, platform = compiled
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == set(spec["deploymentSpec"]["executors"])
    for name, config in executors.items():
        (mount,) = config["pvcMount"]
        assert mount["mountPath"] == "/mnt/dailyrec", name
        assert mount["pvcNameParameter"]["runtimeValue"]["constant"] == "dailyrec-data", name
    for name, executor in spec["deploymentSpec"]["executors"].items():
        resources = executor["container"]["resources"]
        if name == "exec-evaluate-op":  # sized at run time from the test split (estimate's outputs)
            assert "estimate-op-evaluate_cpu" in resources["resourceCpuRequest"], name
            continue
        assert resources["cpuRequest"] > 0 and resources["memoryRequest"] > 0, name


def test_compiled_pipeline_parameters_and_defaults(spec):
    assert spec["pipelineInfo"]["name"] == "dailyrec-daily"
    params = spec["root"]["inputDefinitions"]["parameters"]
    defaults = {name: p.get("defaultValue") for name, p in params.items()}
    assert (
        defaults["run_date"] == ""
        and defaults["window_days"] == 11
        and defaults["history_days"] == 3
    )
    assert defaults["model_config"] == "prod" and defaults["hardware_profile"] == "a100-40gb"
    assert (
        defaults["min_auc"] == 0.55
        and defaults["tolerance"] == 0.002
        and defaults["warm_start"] is True
    )
    # the run form holds what a person starting a run chooses; the deployment's settings are
    # constants of the compiled pipeline, passed to both root tasks
    assert not set(DEPLOYMENT) & set(params)
    assert {"run_date", "deadline_hours", "max_epochs", "run_id", "dask_workers"} <= set(params)
    tasks = spec["root"]["dag"]["tasks"]
    baked = {
        name: source["runtimeValue"]["constant"]
        for name, source in tasks["finalize"]["inputs"]["parameters"].items()
        if name in DEPLOYMENT
    }
    assert baked["model_name"] == "dailyrec" and baked["tracking_uri"].startswith("http://mlflow.")
    assert baked["storage_root"] == "/mnt/dailyrec" and baked["launcher"] == "local"
    channels = tasks["exit-handler-1"]["inputs"]["parameters"]
    for name in DEPLOYMENT:
        assert "runtimeValue" in channels[f"pipelinechannel--{name}"], name
    assert params["deadline_hours"]["parameterType"] == "NUMBER_DOUBLE"
    assert params["warm_start"]["parameterType"] == "BOOLEAN"
    undocumented = [name for name, p in params.items() if len(p.get("description", "")) < 10]
    assert not undocumented, f"parameters without a description in the Kubeflow UI: {undocumented}"


def test_compiled_pipeline_tasks_edges_and_caching(spec):
    dags = spec["components"]
    root_tasks = spec["root"]["dag"]["tasks"]
    # the exit handler wraps the run; finalize runs whatever happened
    assert root_tasks["finalize"]["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    handler = next(name for name in root_tasks if name.startswith("exit-handler"))
    inner = dags[root_tasks[handler]["componentRef"]["name"]]["dag"]["tasks"]
    assert {
        "resolve-window",
        "preprocess-op",
        "estimate-op",
        "train-op",
        "evaluate-op",
        "register-op",
    } < set(inner)
    edges = {name: set(task.get("dependentTasks", [])) for name, task in inner.items()}
    assert edges["resolve-window"] == {
        "check-parameters"
    }  # every parameter checked before the first task
    assert edges["preprocess-op"] == {"resolve-window"}
    assert edges["estimate-op"] == {"preprocess-op", "resolve-window"}
    assert edges["train-op"] == {"estimate-op", "preprocess-op", "resolve-window"}
    assert "train-op" in edges["evaluate-op"]
    # register follows evaluate unconditionally and reads the decision itself (no sub-DAG: a
    # condition inside the exit handler leaves the state a KFP backend hands the handler stale)
    assert "evaluate-op" in edges["register-op"] and "triggerPolicy" not in inner["register-op"]
    assert not any(name.startswith("condition") for name in inner)
    # caching: only preprocess (keyed on the input fingerprint)
    assert inner["preprocess-op"]["cachingOptions"] == {"enableCache": True}
    assert "input_fingerprint" in inner["preprocess-op"]["inputs"]["parameters"]
    for name in ("resolve-window", "estimate-op", "train-op", "evaluate-op", "register-op"):
        assert not inner[name]["cachingOptions"].get("enableCache"), name


def test_compiled_components_use_the_project_image_without_pip(spec):
    executors = spec["deploymentSpec"]["executors"]
    assert (
        len(executors) == 8
    )  # check-parameters, resolve, preprocess, estimate, train, evaluate, register, finalize
    for name, executor in executors.items():
        container = executor["container"]
        assert container["image"] == RUNTIME_IMAGE, name
        assert "pip install" not in " ".join(container["command"]), name
    evaluate_outputs = spec["components"]["comp-evaluate-op"]["outputDefinitions"]
    assert {a["artifactType"]["schemaTitle"] for a in evaluate_outputs["artifacts"].values()} == {
        "system.Metrics",
        "system.ClassificationMetrics",
        "system.Markdown",
    }


def test_run_config_is_checked_and_typed(tmp_path):
    params = load_config(
        "configs/local.json", {"max_epochs": "1", "warm_start": "False", "deadline_hours": 2}
    )
    assert params["model_config"] == "local" and params["max_epochs"] == 1
    assert params["warm_start"] is False and params["deadline_hours"] == 2.0
    with pytest.raises(LocalRunError, match="unknown pipeline parameter.*epochs"):
        load_config(None, {"epochs": 3})
    with pytest.raises(LocalRunError, match="window_days must be a int"):
        load_config(None, {"window_days": '"eleven"'})


# ----------------------------------------------------------------------------- local runs


@pytest.fixture
def local_env(monkeypatch):
    """run_local points TMPDIR into the run folder: give it back afterwards."""
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", tempfile.gettempdir()))
    yield
    tempfile.tempdir = None


def tiny_params(**overrides):
    return load_config(
        "configs/debug.json",
        {"window_days": 4, "history_days": 1, "min_auc": 0.0, "global_batch": 512, **overrides},
    )


def artifact_metadata(run) -> dict[str, dict]:
    """``task/artifact`` -> metadata, from the executor outputs kfp.local wrote for a run."""
    found = {}
    for path in run.glob("kfp/outputs/*/*/executor_output.json"):
        for name, item in json.loads(path.read_text()).get("artifacts", {}).items():
            found[f"{path.parent.name}/{name}"] = item["artifacts"][0].get("metadata", {})
    return found


@pytest.mark.integration
def check_console(out: str, code: int, run) -> None:
    """What `make run` prints: one line per task start and end, progress, the summary once; KFP's
    executor JSON and torchrun's banner only in the per-task logs the summary names."""
    assert code == 0, out
    assert len(out) < 6000, f"{len(out)} characters:\n{out}"  # KFP's own output of this run: ~58 KB
    assert (
        "executor_input" not in out
        and '"parameterValues"' not in out
        and "[KFP Executor" not in out
    )
    assert "OMP_NUM_THREADS" not in out  # torchrun's banner: the thread variables are set
    assert out.count(f"run {run.name}: SUCCEEDED") == 1  # the summary, once
    for task in (
        "check-parameters",
        "resolve-window",
        "preprocess",
        "estimate",
        "train",
        "evaluate",
        "register",
        "finalize",
    ):
        assert f" {task} " in out and any(
            f" {task} " in line and " done in " in line for line in out.splitlines()
        ), task
    assert "phase sequence: started" in out and "epoch 1/" in out  # progress of long tasks
    logs = run / "logs"
    assert f"logs     {logs}/" in out
    assert "executor_input" in (logs / "train-op.log").read_text()
    assert json.loads((run / "summary.json").read_text())["logs"] == str(logs)


def test_two_daily_runs_through_kfp_local(tmp_path, local_env, capsys):
    from pipelines.local import main

    raw = small_world(tmp_path / "raw")
    root = tmp_path / "store"

    # day 1, as `make run` runs it: no champion yet -> blessed, registered, champion
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_params()))
    code = main(
        ["--config", str(config), "--data", str(raw), "--root", str(root), "--run-id", "day1"]
    )
    check_console(capsys.readouterr().out, code, root / "runs" / "day1")
    written = json.loads((root / "runs" / "day1" / "summary.json").read_text())
    assert set(written) == SUMMARY_KEYS  # every field, null where a stage has none
    first = RunSummary.from_document(written)
    assert first.status == "SUCCEEDED", first
    assert first.run_date == "2026-01-05" and first.plan["model"] == "debug"
    # cpu-local plans one training process per core: torchrun with 2 on a 2-core machine
    trained = json.loads((root / "runs" / "day1" / "train" / "train_summary.json").read_text())
    cores = max(n for n in range(1, (os.cpu_count() or 1) + 1) if 512 % n == 0)
    assert trained["world_size"] == first.plan["nproc_per_node"] == cores
    assert (
        set(first.dataset_rows) == {"train", "val", "test"} and first.dataset_rows["test"] == 2500
    )
    assert 0.0 < first.test_auc < 1.0 and 0.0 < first.oracle_auc < 1.0
    assert first.blessed and first.model_version == 1 and first.champion_version == 1
    assert all(first.stage_seconds[s] is not None for s in STAGES)
    run = root / "runs" / "day1"
    for name in (
        "plan.json",
        "train/best.pt",
        "evaluate/decision.json",
        "evaluate/report.md",
        "registration.json",
        "summary.json",
    ):
        assert (run / name).exists(), name
    assert json.loads((root / "runs" / "latest" / "summary.json").read_text())["run_id"] == "day1"
    # the artifacts that link dataset -> plan -> model -> evaluation -> registration keep their metadata
    meta = artifact_metadata(run)
    dataset = meta["preprocess-op/dataset"]
    assert {s: dataset[f"{s}_rows"] for s in ("train", "val", "test")} == first.dataset_rows
    assert dataset["uri"] == str(root / "datasets" / f"2026-01-05-{dataset['fingerprint'][:12]}")
    assert meta["estimate-op/plan"]["model"] == "debug"
    assert meta["train-op/model"]["checkpoint"] == str(run / "train" / "best.pt")
    assert meta["evaluate-op/metrics"]["test_auc"] == pytest.approx(first.test_auc, abs=1e-6)
    assert (
        meta["register-op/registration"]["version"]
        == 1
        == meta["register-op/registration"]["champion_version"]
    )
    client = MlflowClient(sqlite_uri(root / "runs"), registry_uri=sqlite_uri(root / "runs"))
    assert client.get_registered_model("dailyrec").aliases == {"champion": 1}
    # the version's model card, read from the registry, agrees with the run's own records
    registration = Registration.read(run)
    run_of_card = client.get_model_version("dailyrec", "1").run_id
    assert registration.model_card == f"runs:/{run_of_card}/model_card/model_card.md"
    assert first.model_card == registration.model_card  # linked from the run summary
    folder = pathlib.Path(
        client.download_artifacts(run_of_card, "model_card", str(tmp_path / "card"))
    )
    card = json.loads((folder / "model_card.json").read_text())
    evaluation = json.loads((run / "evaluate" / "metrics.json").read_text())
    assert card["test"]["auc"] == pytest.approx(first.test_auc, abs=1e-9)
    assert card["test"]["auc_interval"] == evaluation["test_auc_interval"]
    assert card["test"]["served_auc"] == pytest.approx(first.served_auc, abs=1e-9)
    assert card["test"]["train_serve_skew"] == evaluation["served"]["skew"]
    assert card["data"]["rows"] == first.dataset_rows
    assert card["data"]["dataset_fingerprint"] == dataset["fingerprint"]
    assert card["model"] == {
        "name": "dailyrec",
        "version": 1,
        "aliases_at_registration": ["champion"],
    }
    assert card["gate"]["reasons"] == list(first.decision_reasons)
    assert card["lineage"]["evaluation_run_id"] == evaluation["mlflow_run_id"]
    assert card["lineage"]["training_run_id"] == trained["mlflow_run_id"]
    page = (folder / "model_card.md").read_text()
    assert page.startswith("# dailyrec v1: blessed — champion") and f"{first.test_auc:.4f}" in page

    # day 2: tomorrow's logs; meets yesterday's champion; a floor it cannot reach -> not blessed
    generate(extended(raw, 1))
    second = run_local(tiny_params(raw_uri=str(raw), min_auc=0.99), root, run_id="day2")
    assert second.status == "SUCCEEDED", second
    assert second.run_date == "2026-01-06"
    assert second.blessed is False and second.model_version is None
    # register ran (no condition in the exit handler) and registered nothing
    assert second.champion_version == 1 and second.stage_seconds["register"] is not None
    reasons = " ".join(second.decision_reasons)
    assert "< min_auc 0.9900" in reasons and "vs champion v1" in reasons
    # the comparison takes users as the unit and says what it could have detected
    decision = Decision.read(root / "runs" / "day2" / "evaluate")
    assert "users as the unit" in reasons and 0 < decision.detectable_effect < 0.5
    assert f"detects a loss of {decision.detectable_effect:.4f} AUC" in reasons
    # the data guards compared the new day with the window champion v1 trained on (its profile
    # travels with the version)
    guards = json.loads((root / "runs" / "day2" / "evaluate" / "metrics.json").read_text())[
        "guards"
    ]
    first_eval = json.loads((root / "runs" / "day1" / "evaluate" / "metrics.json").read_text())
    days = first_eval["data_profile"]["days"]
    assert guards["reference"]["days"] == f"{days[0]} .. {days[-1]}"
    # the test day (the newest) is guarded first, then the other days the champion never saw
    assert guards["days"][0]["day"] == "2026-01-06" == guards["test_days"][0]
    assert not guards["blocked"]
    assert "data guards:" in reasons
    assert client.get_registered_model("dailyrec").aliases == {"champion": 1}
    assert len(client.search_model_versions("name = 'dailyrec'")) == 1
    train_record = json.loads((root / "runs" / "day2" / "stages" / "train.json").read_text())
    assert train_record["warm_start"]["applied"] is True  # initialized from champion v1
    # the summary and its readable end say where training started from
    assert second.warm_start == train_record["warm_start"]
    assert str(second.warm_start["version"]) == "1"
    assert "  warm     from dailyrec v1's weights" in second.text()
    assert first.warm_start["applied"] is False
    assert "  warm     no champion of dailyrec yet: trained from scratch" in first.text()
    assert json.loads((root / "runs" / "latest" / "summary.json").read_text())["run_id"] == "day2"
    # KFP's working folders stayed inside the run folders
    assert (root / "runs" / "day2" / "kfp" / "outputs").is_dir()

    # a run that fails still writes its summary, and one that fails before evaluate still says
    # who is champion
    empty = tmp_path / "empty"
    (empty / "dt=2026-01-01").mkdir(parents=True)
    broken = run_local(tiny_params(raw_uri=str(empty)), root, run_id="broken")
    assert broken.status == "FAILED" and broken.failed_stage == "preprocess"
    assert broken.blessed is None and RunSummary.read(root / "runs" / "broken") == broken
    assert broken.champion_version == 1 and "champion = v1" in broken.text()
