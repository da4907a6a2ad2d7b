"""The share of device memory a plan may use is declared once (components.common.plan): every
place that plans memory -- the estimate stage, the tuner, its trials, Katib -- defaults to it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from components.common.plan import MEMORY_FRACTION
from components.estimate.__main__ import build_parser as estimate_parser
from components.estimate.planner import EstimateConfig
from components.tune.config import TuneConfig
from components.tune.space import feasible_architectures
from components.tune.trial import build_parser as trial_parser
from components.tune.trial import write_trial_plan
from kube.katib import KatibConfig


@pytest.mark.parametrize("config", [EstimateConfig, TuneConfig, KatibConfig])
def test_config_defaults(config):
    fields = {f.name: f for f in dataclasses.fields(config)}
    assert fields["memory_fraction"].default == MEMORY_FRACTION


@pytest.mark.parametrize("function", [feasible_architectures, write_trial_plan])
def test_function_defaults(function):
    default = inspect.signature(function).parameters["memory_fraction"].default
    assert default == MEMORY_FRACTION


@pytest.mark.parametrize("parser", [estimate_parser, trial_parser])
def test_cli_defaults(parser):
    actions = {a.dest: a for a in parser()._actions}
    assert actions["memory_fraction"].default == MEMORY_FRACTION
