"""Stage CLIs built from their config dataclass: each field is a flag with the field's default, so a
field added to a config is on its CLI; the hand-written flags are the listed exceptions."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
from pathlib import Path

import pytest

from components.common.cli import add_config_flags

ROOT = Path(__file__).resolve().parents[2]

# module, config classes, fields with a hand-written flag, fields without a flag, flags that are
# not fields
CLIS = [
    (
        "components.preprocess.__main__",
        ["components.preprocess.config.PreprocessConfig"],
        (),
        (),
        (),
    ),
    # --hardware's help lists the profiles present; --out is where plan.json goes
    (
        "components.estimate.__main__",
        ["components.estimate.config.EstimateConfig"],
        ("hardware",),
        (),
        ("out",),
    ),
    # --out is a Path; --append-days extends an existing dataset with its own config
    (
        "components.datagen.__main__",
        ["components.datagen.config.DatagenConfig"],
        ("out",),
        (),
        ("append_days",),
    ),
    # --json prints the full accounting
    ("components.score.__main__", ["components.score.config.ScoreConfig"], (), (), ("json",)),
    # --tracking-uri's default is $MLFLOW_TRACKING_URI; the rule's and the guards' fields are
    # flags of their own
    (
        "components.evaluate.__main__",
        [
            "components.evaluate.config.EvaluateConfig",
            "components.evaluate.decision.GateRule",
            "components.evaluate.guards.GuardRule",
        ],
        ("tracking_uri",),
        ("rule", "guards"),
        (),
    ),
    # --tracking-uri is resolved at run time; the field user_state defaults to True, its flag is
    # the switch --no-user-state
    (
        "components.register.__main__",
        ["components.register.config.RegisterConfig"],
        ("tracking_uri", "user_state"),
        (),
        (),
    ),
    # --tracking-uri's default is $MLFLOW_TRACKING_URI
    (
        "components.train.__main__",
        ["components.train.config.TrainConfig"],
        ("tracking_uri",),
        (),
        (),
    ),
    # --space/--enqueue take JSON text or a file; --fresh clears an earlier search
    (
        "components.tune.__main__",
        ["components.tune.config.TuneConfig"],
        ("space", "enqueue"),
        (),
        ("fresh",),
    ),
]


def test_each_stage_declares_its_config_in_its_config_module():
    # one place a newcomer looks for a stage's settings: components/<stage>/config.py
    stages = sorted(p.parent.name for p in ROOT.glob("components/*/__main__.py"))
    assert stages == sorted(module.split(".")[1] for module, *_ in CLIS), "a CLI is not listed"
    for module, configs, *_ in CLIS:
        stage = module.split(".")[1]
        config = load(configs[0])
        assert config.__module__ == f"components.{stage}.config", (
            f"{config.__name__} is declared in {config.__module__}, not components/{stage}/config.py"
        )


def load(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(("module", "configs", "hand_written", "unflagged", "extra"), CLIS)
def test_a_stage_cli_has_one_flag_per_config_field_with_its_default(
    module, configs, hand_written, unflagged, extra
):
    parser = importlib.import_module(module).build_parser()
    actions = {
        a.dest: a
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    }
    fields = {
        f.name: f
        for config in configs
        for f in dataclasses.fields(load(config))
        if f.name not in unflagged
    }
    assert set(actions) == set(fields) | set(extra), module
    for name, f in fields.items():
        if name in hand_written:  # a parse, default or switch of its own
            continue
        assert actions[name].option_strings[0] == f"--{name.replace('_', '-')}", name
        if f.default is dataclasses.MISSING:
            assert actions[name].required, name
        else:
            assert actions[name].default == f.default, name
        assert actions[name].choices == f.metadata.get("choices"), name


def test_config_flags_parse_dates_and_optional_switches(capsys):
    @dataclasses.dataclass(frozen=True)
    class Config:
        day: dt.date | None = None
        """The day (default: the latest)."""
        probe: bool | None = None
        """Probe (default: where it can)."""
        share: float = 0.5
        """A 50% share."""

    p = argparse.ArgumentParser()
    add_config_flags(p, Config)
    assert vars(p.parse_args([])) == {"day": None, "probe": None, "share": 0.5}
    assert vars(p.parse_args(["--day", "2024-05-02", "--no-probe"])) == {
        "day": dt.date(2024, 5, 2),
        "probe": False,
        "share": 0.5,
    }
    assert p.parse_args(["--probe"]).probe is True
    assert "A 50% share" in p.format_help()  # a % in a docstring is not a format directive
    with pytest.raises(SystemExit, match="2"):
        p.parse_args(["--day", "2024-13-01"])
    assert "argument --day: not a date YYYY-MM-DD: '2024-13-01'" in capsys.readouterr().err


def test_a_field_with_a_default_factory_must_get_a_flag_of_its_own():
    @dataclasses.dataclass(frozen=True)
    class Made:
        sizes: int = dataclasses.field(default_factory=lambda: 3)
        """Sizes."""

    with pytest.raises(TypeError, match="Made.sizes: a default_factory field needs its own flag"):
        add_config_flags(argparse.ArgumentParser(), Made)
