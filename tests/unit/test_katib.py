"""The Katib Experiment generator: validated with the kubeflow-katib-api models, a TrainJob trial
spec with Katib placeholders, hyperband's arithmetic; and the search space's memory filter."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
import yaml

import components.estimate.planner as planner
from components.common.plan import TrainPlan
from components.estimate.hardware import load_profile
from components.train.model import NAMED_CONFIGS, REFERENCE_VOCAB
from components.tune.space import SearchSpace, SpaceError, feasible_architectures, trial_model
from kube.katib import (
    METRIC_FILTER,
    KatibConfig,
    KatibError,
    experiment,
    hyperband_budget,
    log_grid,
    main,
    validate_experiment,
    window_dataset,
    write_experiment,
)
from kube.types import cpu_quantity, memory_quantity, quantity
from kube.validate import DEFAULT_CRDS, crd_schemas

DATA = "/mnt/dailyrec/datasets/2026-01-14"

# the trainer's per-epoch line (components/train/trainer.py), as it reaches the pod's log
TRAINER_LINE = (
    "12:00:01 INFO components.train.trainer: epoch 2/9  loss 0.4321  val_auc 0.7326 "
    "(best 0.7326 @2)  lr 1.95e-03  5000 samples/s  data-wait 1.3%  12.4s"
)


@pytest.fixture(scope="module")
def hyperband():
    return experiment(KatibConfig(env="a100", data=DATA))


def trial_args(doc: dict) -> list[str]:
    return doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["trainer"]["args"]


def test_experiment_objective_algorithm_and_budget(hyperband):
    spec = hyperband["spec"]
    assert hyperband["apiVersion"] == "kubeflow.org/v1beta1" and hyperband["kind"] == "Experiment"
    assert hyperband["metadata"] == {
        "name": "dailyrec-tune",
        "namespace": "dailyrec",
        "labels": {"app.kubernetes.io/part-of": "dailyrec"},
    }
    assert spec["objective"] == {
        "type": "maximize",
        "objectiveMetricName": "val_auc",
        "metricStrategies": [{"name": "val_auc", "value": "max"}],
    }
    assert spec["algorithm"]["algorithmName"] == "hyperband"
    settings = {s["name"]: s["value"] for s in spec["algorithm"]["algorithmSettings"]}
    assert settings == {"resource_name": "max_epochs", "eta": "3", "r_l": "9"}
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == hyperband_budget(9, 3) == (23, 9)
    assert spec["metricsCollectorSpec"] == {
        "collector": {"kind": "StdOut"},
        "source": {"filter": {"metricsFormat": [METRIC_FILTER]}},
    }
    params = {p["name"]: p for p in spec["parameters"]}
    assert set(params) == {
        "lr",
        "weight_decay",
        "warmup_fraction",
        "dropout",
        "d_model",
        "layers",
        "max_epochs",
    }
    assert params["lr"]["parameterType"] == "discrete"  # hyperband samples uniformly: a log grid
    assert (
        params["lr"]["feasibleSpace"]["list"][0] == "0.0003"
        and params["lr"]["feasibleSpace"]["list"][-1] == "0.01"
    )
    assert params["d_model"]["feasibleSpace"]["list"] == ["16", "32", "64"]
    assert params["max_epochs"]["feasibleSpace"] == {"min": "1", "max": "9"}
    assert validate_experiment(hyperband) == []


def test_trial_template_is_a_trainjob_with_placeholders(hyperband):
    template = hyperband["spec"]["trialTemplate"]
    job = template["trialSpec"]
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["kind"] == "TrainJob"
    assert (
        "name" not in job["metadata"] and "namespace" not in job["metadata"]
    )  # Katib names trials
    assert template["primaryContainerName"] == "node" and template["primaryPodLabels"]
    assert template["successCondition"].startswith('status.conditions.#(type=="Complete")')
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "--module", "components.tune.trial"]
    assert trainer["numProcPerNode"] == 1 and trainer["resourcesPerNode"]["limits"] == {
        "cpu": "11",
        "memory": "75Gi",
        "nvidia.com/gpu": "1",
    }
    assert (
        trainer["resourcesPerNode"]["requests"]["cpu"] == "11"
    )  # 88 cores / 8 GPUs: trials share nodes
    args = trial_args(hyperband)
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert (
        flags["--lr"] == "${trialParameters.learningRate}"
        and flags["--d-model"] == "${trialParameters.dModel}"
    )
    assert flags["--max-epochs"] == "${trialParameters.maxEpochs}"
    assert flags["--out"].endswith("/dailyrec-tune/${trialParameters.trialName}")
    assert (
        flags["--base-model"] == "prod"
        and flags["--hardware"] == "a100-40gb"
        and flags["--resume"] == "auto"
    )
    references = {p["name"]: p["reference"] for p in template["trialParameters"]}
    assert (
        references["trialName"] == "${trialSpec.Name}" and references["maxEpochs"] == "max_epochs"
    )
    used = set(re.findall(r"\$\{trialParameters\.([^}]+)\}", json.dumps(job)))
    assert used == set(references)
    runtime = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ][0]
    assert runtime["template"]["spec"]["template"]["spec"]["nodeSelector"]  # the A100 pool


def test_metric_filter_reads_the_trainer_line():
    assert re.findall(METRIC_FILTER, TRAINER_LINE) == [("val_auc", "0.7326")]
    assert re.findall(METRIC_FILTER, "summary best_val_auc 0.9") == []
    assert re.compile(METRIC_FILTER).groups == 2  # Katib: name, value


def test_random_and_tpe_use_log_uniform_and_a_fixed_epoch_count():
    doc = experiment(
        KatibConfig(env="local", algorithm="tpe", max_epochs=3, name="cpu-search", data=DATA)
    )
    spec = doc["spec"]
    assert spec["algorithm"] == {"algorithmName": "tpe"} and spec["maxTrialCount"] == 24
    params = {p["name"]: p for p in spec["parameters"]}
    assert "max_epochs" not in params
    assert params["weight_decay"] == {
        "name": "weight_decay",
        "parameterType": "double",
        "feasibleSpace": {"min": "0.000001", "max": "0.01", "distribution": "logUniform"},
    }
    flags = dict(zip(trial_args(doc)[::2], trial_args(doc)[1::2], strict=True))
    assert flags["--max-epochs"] == "3" and flags["--hardware"] == "cpu-local"
    assert "nvidia.com/gpu" not in json.dumps(doc)


def test_validation_reports_what_katib_would_refuse(hyperband):
    def broken(change) -> list[str]:
        doc = copy.deepcopy(hyperband)
        change(doc)
        return validate_experiment(doc)

    assert any(
        "parallelTim" in p for p in broken(lambda d: d["spec"].update(parallelTim=3))
    )  # misspelled
    assert any(
        "parallelTrialCount must be at least 9" in p
        for p in broken(lambda d: d["spec"].update(parallelTrialCount=3))
    )
    assert any(
        "undefined trialParameters: nope" in p
        for p in broken(
            lambda d: d["spec"]["trialTemplate"]["trialSpec"]["spec"]["trainer"]["args"].append(
                "${trialParameters.nope}"
            )
        )
    )
    assert any(
        "not used in the trialSpec" in p
        for p in broken(
            lambda d: d["spec"]["trialTemplate"]["trialParameters"].append(
                {"name": "extra", "reference": "lr2"}
            )
        )
    )
    assert any(
        "metadata.name and metadata.namespace must be omitted" in p
        for p in broken(
            lambda d: d["spec"]["trialTemplate"]["trialSpec"]["metadata"].update(name="x")
        )
    )
    assert any(
        "two groups" in p
        for p in broken(
            lambda d: d["spec"]["metricsCollectorSpec"]["source"]["filter"].update(
                metricsFormat=["val_auc ([0-9.]+)"]
            )
        )
    )
    assert any(
        "Katib models" in p for p in broken(lambda d: d["spec"].update(maxTrialCount="many"))
    )
    assert any(
        "objective" in p for p in broken(lambda d: d["spec"]["objective"].update(type="best"))
    )
    assert any(
        "resource_name" in p
        for p in broken(
            lambda d: d["spec"]["algorithm"]["algorithmSettings"].__setitem__(
                0, {"name": "resource_name", "value": "epochs"}
            )
        )
    )
    assert any(
        "numProcPerNode" in p or "num_proc_per_node" in p
        for p in broken(
            lambda d: d["spec"]["trialTemplate"]["trialSpec"]["spec"]["trainer"].update(
                numProcPerNode=[1]
            )
        )
    )


def test_trial_trainjob_matches_the_trainer_crd(hyperband):
    schemas = crd_schemas(DEFAULT_CRDS)  # strict: fields Trainer 2.3 does not know are errors
    assert ("trainer.kubeflow.org/v1alpha1", "TrainJob") in schemas
    assert validate_experiment(hyperband, schemas) == []
    doc = copy.deepcopy(hyperband)
    doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["trainer"]["numNodes"] = "two"
    assert any("trialSpec" in p and "numNodes" in p for p in validate_experiment(doc, schemas))
    doc = copy.deepcopy(hyperband)
    doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["podTemplateOverrides"] = []
    assert any("podTemplateOverrides" in p for p in validate_experiment(doc, schemas))


def test_write_experiment_and_cli(tmp_path, capsys):
    doc = write_experiment(
        tmp_path / "exp.yaml",
        "a100",
        data="/mnt/dailyrec/datasets/2026-03-01",
        image="registry.example.com/dailyrec-trainer:abc",
    )
    assert (
        yaml.safe_load((tmp_path / "exp.yaml").read_text()) == doc
    )  # numbers stay strings in YAML
    assert doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["trainer"]["image"].endswith(":abc")
    assert "/mnt/dailyrec/datasets/2026-03-01" in trial_args(doc)
    assert (
        main(["--env", "local", "--algorithm", "random", "--out", str(tmp_path / "cli.yaml")]) == 0
    )
    assert "random, 24 trials" in capsys.readouterr().out
    assert main(["--env", "mars", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "no cluster target" in capsys.readouterr().err
    assert main(["--space", '{"lr": [0.1, 0.01]}', "--out", str(tmp_path / "x.yaml")]) == 2
    with pytest.raises(KatibError, match="lower-case DNS label"):
        KatibConfig(name="Dailyrec_Tune")


def test_hyperband_budget_grid_and_share():
    assert hyperband_budget(3, 3) == (6, 3) and hyperband_budget(27, 3) == (70, 27)
    assert log_grid(1e-4, 1e-2, 3) == ["0.0001", "0.001", "0.01"] and log_grid(0.5, 0.5) == ["0.5"]
    assert (
        cpu_quantity(quantity("88") / 8) == "11"
        and memory_quantity(quantity("600Gi") / 8) == "75Gi"
    )
    assert (
        cpu_quantity(quantity("500m") / 2) == "250m"
        and memory_quantity(quantity("1Gi") / 3) == "341Mi"
    )


def test_the_experiment_is_bound_to_the_current_window(tmp_path):
    """Katib follows datasets/latest, which each preprocess moves forward (never back: a backfill)."""
    from components.common.runs import point_latest

    assert window_dataset() == "/mnt/dailyrec/datasets/latest"
    assert window_dataset(root=str(tmp_path)) == str(tmp_path / "datasets" / "latest")
    folders = {
        name: tmp_path / "datasets" / name
        for name in (
            "2026-03-01-aaaaaaaaaaaa",
            "2026-03-02-bbbbbbbbbbbb",
            "2026-02-20-cccccccccccc",
        )
    }
    for folder in folders.values():
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(folder.name)
    latest = tmp_path / "datasets" / "latest"
    assert (
        point_latest(folders["2026-03-01-aaaaaaaaaaaa"])
        and (latest / "meta.json").read_text() == "2026-03-01-aaaaaaaaaaaa"
    )
    assert (
        point_latest(folders["2026-03-02-bbbbbbbbbbbb"])
        and os.readlink(latest) == "2026-03-02-bbbbbbbbbbbb"
    )
    assert not point_latest(folders["2026-02-20-cccccccccccc"])  # a backfill of an older day
    assert os.readlink(latest) == "2026-03-02-bbbbbbbbbbbb"
    assert sorted(p.name for p in latest.parent.iterdir()) == sorted(
        [*folders, "latest"]
    )  # no temp left
    with pytest.raises(
        KatibError, match="data: the dataset folder of the window to search on is required"
    ):
        KatibConfig(env="a100")


# ----------------------------------------------------------------------------- search space


def test_search_space_checks_its_input():
    assert SearchSpace.from_dict({"d_model": [32, 16]}).d_model == (16, 32)
    for bad, message in (
        ({"lr": [0.1, 2]}, "space.lr must lie in"),
        ({"lr": [0.01, 0.001]}, "low <= high"),
        ({"weight_decay": [0, 1e-2]}, "low must be > 0"),
        ({"layers": []}, "non-empty"),
        ({"heads": [2]}, "unknown parameter 'heads'"),
        ({"dropout": [0, 1]}, "[0, 1)"),
    ):
        with pytest.raises(SpaceError, match=re.escape(message)):
            SearchSpace.from_dict(bad)
    with pytest.raises(SpaceError, match="d_model=12 is not one of"):
        SearchSpace().check_params({"d_model": 12})


def test_trial_model_keeps_the_base_shape():
    base = NAMED_CONFIGS["prod"]  # 64 x 2 x 4 heads, ffn 256
    config = trial_model(base, {"d_model": 16, "layers": 3, "dropout": 0.2}, "t")
    assert (config.d_model, config.layers, config.heads, config.ffn, config.dropout) == (
        16,
        3,
        4,
        64,
        0.2,
    )
    assert config.mlp == base.mlp and config.name == "t"
    assert (
        trial_model(NAMED_CONFIGS["debug"], {"d_model": 9}, "odd").heads == 1
    )  # 2 does not divide 9


def test_memory_filter_keeps_a_product_of_choices_that_fit(monkeypatch):
    profile = load_profile("a100-40gb")
    vocab = REFERENCE_VOCAB["prod"]
    plan = TrainPlan(model="prod", micro_batch=1, grad_accum=8192, precision="bf16")
    space = SearchSpace(d_model=(16, 32, 64), layers=(1, 2, 3))
    archs = feasible_architectures(space, NAMED_CONFIGS["prod"], vocab, profile, plan)
    assert (archs.d_model, archs.layers) == ((16, 32, 64), (1, 2, 3))  # an A100 holds them all
    assert all(r["fits"] and r["micro_batch"] >= 1 for r in archs.rows)

    real = planner.largest_micro_batch
    calls = []

    def fake(config, *args, **kwargs):  # pretend 64-wide models fit only with 1 layer
        calls.append((config.d_model, config.layers, args[6]))
        if config.d_model == 64 and config.layers > 1:
            return None
        return real(config, *args, **kwargs)

    monkeypatch.setattr(planner, "largest_micro_batch", fake)
    archs = feasible_architectures(space, NAMED_CONFIGS["prod"], vocab, profile, plan)
    # without d_model 64: 2 x 3 pairs; keeping it allows only 3 x 1 (64 fits with 1 layer only)
    assert (archs.d_model, archs.layers) == ((16, 32), (1, 2, 3))
    assert {c[2] for c in calls} == {False}  # never with activation checkpointing
    assert "(left out)" in archs.table() and "does not fit" in archs.table()
    monkeypatch.setattr(planner, "largest_micro_batch", lambda *a, **k: None)
    with pytest.raises(SpaceError, match="no architecture of the search space fits a100-40gb"):
        feasible_architectures(space, NAMED_CONFIGS["prod"], vocab, profile, plan)


def test_katib_and_tune_share_the_parameter_names():
    from components.tune.space import PARAMS
    from kube.katib import TRIAL_PARAMETERS

    assert {param for param, _ in TRIAL_PARAMETERS.values()} == set(PARAMS)
    assert Path("configs/tune.json").is_file() and Path("configs/tune-debug.json").is_file()


def test_cli_flags_are_the_config_fields(tmp_path, capsys):
    import dataclasses

    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    for f in dataclasses.fields(KatibConfig):
        assert f"--{f.name.replace('_', '-')}" in shown, f.name
    out = tmp_path / "exp.yaml"
    flags = ["--env", "local", "--data", "/d", "--algorithm", "random", "--root", "/r"]
    assert (
        main([*flags, "--max-trial-count", "5", "--parallel-trial-count", "2", "--out", str(out)])
        == 0
    )
    spec = yaml.safe_load(out.read_text())["spec"]
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == (5, 2)
    assert "/r/dailyrec-tune/" in " ".join(trial_args(yaml.safe_load(out.read_text())))
