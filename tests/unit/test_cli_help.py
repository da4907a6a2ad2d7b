"""Every ``python -m components.*`` / ``pipelines.*`` CLI: each flag has help text and shows its default."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.common.cli import HelpFormatter, cli_parser, field_docs

ROOT = Path(__file__).resolve().parents[2]


def cli_modules() -> list[str]:
    """Modules under components/ and pipelines/ that build an argument parser in a ``main``."""
    found = []
    for path in sorted([*ROOT.glob("components/**/*.py"), *ROOT.glob("pipelines/**/*.py")]):
        text = path.read_text()
        if "def main(" in text and re.search(r"ArgumentParser\(|cli_parser\(", text):
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def parser_of(module: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser ``module.main`` builds (its first parse is stopped before anything runs)."""

    def capture(self, args=None, namespace=None):
        raise Captured(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    with pytest.raises(Captured) as caught:
        importlib.import_module(module).main(["--help"])
    return caught.value.parser


def parsers(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_the_cli_modules_are_found():
    modules = cli_modules()
    assert {
        "components.preprocess.__main__",
        "components.train.__main__",
        "pipelines.local",
        "pipelines.deploy",
        "components.train.launch",
    } <= set(modules), modules


@pytest.mark.parametrize("module", cli_modules())
def test_every_flag_has_help_and_shows_its_default(module, monkeypatch):
    parser = parser_of(module, monkeypatch)
    for name, each in parsers(parser, module):
        # a whole sentence, not a docstring's first line cut mid-sentence
        assert each.description and each.description.rstrip().endswith((".", ")", "``", "!")), (
            f"{name}: description {each.description!r}"
        )
        assert issubclass(each.formatter_class, HelpFormatter), (
            f"{name}: --help would not show defaults"
        )
        # docstrings become help texts: reStructuredText's double backticks are not for a terminal
        assert "``" not in each.format_help(), f"{name}: ``…`` in its --help"
        formatter = each._get_formatter()
        for action in each._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            flag = "/".join(action.option_strings)
            assert action.help and action.help.strip(), f"{name} {flag}: no help text"
            shown = formatter._get_help_string(action)
            assert "(required)" in shown or "default" in shown.lower(), (
                f"{name} {flag}: no default shown"
            )
            if action.default is None and not action.required:  # "(default: None)" says nothing
                assert "default" in action.help.lower(), (
                    f"{name} {flag}: say what an unset value means"
                )


def test_help_shows_defaults_and_required_and_keeps_explained_defaults(tmp_path):
    p = cli_parser("prog", "A tool.")
    p.add_argument("--size", type=int, default=3, help="how many")
    p.add_argument("--out", required=True, help="where")
    p.add_argument("--uri", default="secret://x", help="store (default: $STORE_URI)")
    text = " ".join(p.format_help().split())
    assert "how many (default: 3)" in text and "where (required)" in text
    assert "store (default: $STORE_URI)" in text and "secret://x" not in text


def test_field_docs_reads_a_configs_attribute_docstrings():
    from components.preprocess.config import PreprocessConfig

    docs = field_docs(PreprocessConfig)
    assert docs["val_days"] == "Days of the validation split (just before the test days)."
    assert docs["max_skew_hours"].startswith("Timestamps may fall this far outside")


def test_pipelines_local_help_lists_every_pipeline_parameter_with_its_description(capsys):
    from pipelines.daily import daily
    from pipelines.local import main

    with pytest.raises(SystemExit, match="0"):
        main(["--help"])
    text = capsys.readouterr().out
    for name, spec in daily.component_spec.inputs.items():
        assert f"  {name} (" in text, name
        assert " ".join(spec.description.split(";")[0].split()) in " ".join(text.split()), name
    assert 'model_config (String, default "prod"; configs/local.json: "local")' in text


@pytest.mark.parametrize(
    "module",
    [
        "components.train",
        "components.evaluate",
        "components.register",
        "components.tune",
        "components.preprocess",
        "components.score",
        "components.estimate",
    ],
)
def test_help_answers_without_importing_torch(module):
    """--help (and a bad flag) must not wait seconds for torch or Dask: the stage is imported
    after parsing."""
    probe = (
        "import runpy, sys, io, contextlib\n"
        f"sys.argv = ['{module}', '--help']\n"
        "try:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        f"        runpy.run_module('{module}', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({'torch', 'dask'} & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
