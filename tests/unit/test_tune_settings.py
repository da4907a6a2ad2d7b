"""The search settings are declared once, on TuneConfig: its CLI, the tune task's and the
dailyrec-tune pipeline's parameters (names, defaults, choices, descriptions) must agree with the
dataclass, so a setting added in one place only fails here."""

from __future__ import annotations

import dataclasses

import pytest

from components.common.cli import field_docs
from components.tune.__main__ import build_parser
from components.tune.config import (
    PIPELINE_PARAMETERS,
    TuneConfig,
    config_from_parameters,
    pipeline_defaults,
    pipeline_docs,
)
from pipelines.ops.tune import tune_op
from pipelines.tune import check_parameters, tune_pipeline

FIELDS = {f.name: f for f in dataclasses.fields(TuneConfig)}
NOT_PIPELINE_PARAMETERS = {
    "data": "the tune task reads the preprocess output",
    "out": "the tune task writes run_dir/tune",
    "experiment": "the pipeline's study always tracks to dailyrec-tune",
    "study_name": "one study per run folder",
    "storage": "sqlite in the run folder: a retried task resumes",
    "memory_fraction": "the estimate stage's share, as in the daily pipeline",
    "name": "tuned.json's config is named tuned",
    "keep_checkpoints": "trial checkpoints would fill the shared volume",
}
"""TuneConfig fields the pipelines do not take, each with its reason: a new field must be
added either here or to PIPELINE_PARAMETERS."""
TASK_ONLY = {"dataset", "run_dir", "storage_root", "tuned", "metrics"}


def test_every_field_is_a_pipeline_parameter_or_says_why_not():
    assert set(PIPELINE_PARAMETERS.values()) <= set(FIELDS)
    assert set(PIPELINE_PARAMETERS.values()) | set(NOT_PIPELINE_PARAMETERS) == set(FIELDS)
    assert not set(PIPELINE_PARAMETERS.values()) & set(NOT_PIPELINE_PARAMETERS)


def test_cli_flags_are_the_fields_with_their_defaults_and_choices():
    actions = {a.dest: a for a in build_parser()._actions if a.dest not in ("help", "fresh")}
    assert set(actions) == set(FIELDS)
    docs = field_docs(TuneConfig)
    for name, f in FIELDS.items():
        action = actions[name]
        assert action.option_strings == [f"--{name.replace('_', '-')}"]
        assert docs[name].rstrip(".") in action.help
        if name in ("space", "enqueue"):  # JSON text; none = the field's default
            assert action.default is None
            continue
        assert action.required == (f.default is dataclasses.MISSING), name
        if not action.required:
            assert action.default == f.default, name
        assert action.choices == f.metadata.get("choices"), name
    # defaults parse into the dataclass's defaults
    parsed = vars(build_parser().parse_args(["--data", "d", "--out", "o"]))
    assert {k: v for k, v in parsed.items() if k not in ("space", "enqueue", "fresh")} == {
        name: getattr(TuneConfig(data="d", out="o"), name)
        for name in FIELDS
        if name not in ("space", "enqueue")
    }


def test_task_and_pipeline_parameters_are_the_settings_with_their_defaults():
    task = tune_op.component_spec.inputs
    assert set(task) == TASK_ONLY - {"tuned", "metrics"} | set(PIPELINE_PARAMETERS)
    pipeline = tune_pipeline.component_spec.inputs
    assert set(PIPELINE_PARAMETERS) <= set(pipeline)
    docs, defaults = pipeline_docs(), pipeline_defaults()
    for param in PIPELINE_PARAMETERS:
        assert task[param].description == pipeline[param].description == docs[param], param
        if param != "tracking_uri":  # the pipeline tracks to the cluster's MLflow
            assert pipeline[param].default == defaults[param], param
    assert pipeline["tracking_uri"].default.startswith("http://mlflow.")
    # the pipeline's defaults describe exactly TuneConfig's defaults
    assert config_from_parameters("d", "o", defaults) == TuneConfig(data="d", out="o")
    assert config_from_parameters("d", "o", {}) == TuneConfig(data="d", out="o")


def test_parameters_are_read_as_the_fields():
    config = config_from_parameters(
        "d",
        "o",
        {
            "hardware_profile": "a100-40gb",
            "trials": 3,
            "search_space": '{"d_model": [8, 16]}',
            "enqueue": '[{"d_model": 8}]',
            "timeout_hours": 0.5,
            "tracking_uri": "",
        },
    )
    assert (config.hardware, config.trials, config.space.d_model) == ("a100-40gb", 3, (8, 16))
    assert config.enqueue == ({"d_model": 8},) and config.timeout_hours == 0.5
    assert config.tracking_uri is None
    with pytest.raises(ValueError, match="enqueue: expected a JSON list"):
        check_parameters({"enqueue": '{"d_model": 8}'})
    with pytest.raises(ValueError, match="reduction_factor must be an integer >= 2"):
        check_parameters({"reduction_factor": 1})


def test_config_flags_follow_the_field_types():
    import argparse

    from components.common.cli import add_config_flags

    @dataclasses.dataclass(frozen=True)
    class Config:
        path: str
        """Where it goes."""
        rate: float | None = None
        """How fast; None (the default) = as fast as it can."""
        keep: bool = False
        """Keep everything."""

    p = argparse.ArgumentParser()
    add_config_flags(p, Config)
    assert vars(p.parse_args(["--path", "x", "--rate", "0.5", "--keep"])) == {
        "path": "x",
        "rate": 0.5,
        "keep": True,
    }
    assert vars(p.parse_args(["--path", "x"])) == {"path": "x", "rate": None, "keep": False}

    @dataclasses.dataclass(frozen=True)
    class Listed:
        sizes: tuple[int, ...] = ()
        """Sizes."""

    with pytest.raises(TypeError, match=r"Listed.sizes: no flag for type tuple\[int, \.\.\.\]"):
        add_config_flags(argparse.ArgumentParser(), Listed)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--set", "trials"], "--set 'trials': expected KEY=VALUE"),
        (["--set", "trial=3"], "unknown pipeline parameter(s) trial"),
    ],
)
def test_make_tune_reads_set_as_make_run_does(argv, says, capsys, tmp_path):
    from pipelines.tune import main

    assert main([*argv, "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tune: error: ") and says in err
    assert "Traceback" not in err and "\n" not in err.strip()
