"""The daily pipeline's parameters are declared once (pipelines/parameters.py): the pipeline's
signature, its check task's signature and the compiled run form follow the declaration."""

from __future__ import annotations

import inspect

import pytest

from pipelines.parameters import DAILY, DEFAULTS, DEPLOYMENT, Parameter, parameters_doc


def _signature(func) -> list[tuple[str, type, object]]:
    return [
        (p.name, p.annotation, p.default)
        for p in inspect.signature(func).parameters.values()
        if p.name != "runner"
    ]


def test_the_pipelines_signature_is_the_declared_parameters():
    from pipelines.daily import daily

    declared = [(p.name, p.type, p.default) for p in DAILY]
    assert _signature(daily.pipeline_func) == declared


def test_the_check_task_takes_every_declared_parameter_in_order():
    from pipelines.daily import check_parameters

    declared = [(p.name, p.type, inspect.Parameter.empty) for p in DAILY]
    assert _signature(check_parameters.python_func) == declared


def test_the_ui_shows_each_declared_meaning_and_the_run_form_only_the_runs_choices():
    from benchmarks.pipeline_graph import compiled_pipeline
    from pipelines.compile import bake
    from pipelines.daily import daily

    assert daily.pipeline_func.__doc__.endswith(parameters_doc())
    form = bake(compiled_pipeline())["root"]["inputDefinitions"]["parameters"]
    assert set(form) == {p.name for p in DAILY if not p.deployment}
    for name, field in form.items():
        assert field.get("defaultValue") == DEFAULTS[name], name
        assert field["description"].startswith(
            next(p.meaning for p in DAILY if p.name == name)[:40]
        )
    assert tuple(p.name for p in DAILY if p.deployment) == DEPLOYMENT


def test_a_default_of_another_type_is_refused():
    with pytest.raises(TypeError, match="parameter x: default '3' is not"):
        Parameter("x", int, "3", "a number")
    with pytest.raises(TypeError, match="parameter y: default True is not"):
        Parameter("y", int, True, "a count, not a flag")


def test_the_sampling_of_negatives_is_the_one_the_benchmark_chose():
    """The daily defaults `negative_keep` and `negatives_per_positive` are what
    benchmarks/downsampling.py measured as the smallest share, and the smallest ratio, of the same
    quality as every row on each world (docs/performance.md)."""
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "downsampling.json"
    measured = json.loads(results.read_text())
    assert DEFAULTS["negative_keep"] == measured["chosen"]
    assert DEFAULTS["negatives_per_positive"] == measured["chosen_ratio"]
