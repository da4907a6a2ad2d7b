"""The registered model's pip requirements install from PyPI (no local version labels such as +cpu)."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import pytest

from components.register.stage import pip_requirements

PYPI = "https://pypi.org/simple"


def test_requirements_are_exact_pins_without_local_versions():
    requirements = pip_requirements()
    assert [r.split("==")[0] for r in requirements] == [
        "mlflow",
        "torch",
        "numpy",
        "pandas",
        "pyarrow",
        "cloudpickle",
    ]
    for requirement in requirements:
        name, _, version = requirement.partition("==")
        assert version and "+" not in version, requirement


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen(f"{PYPI}/pip/", timeout=10):
            return True
    except OSError:
        return False


@pytest.mark.slow
def test_requirements_resolve_from_pypi_in_a_clean_environment(tmp_path):
    if not _pypi_reachable():
        pytest.skip(
            f"{PYPI} is not reachable from here: cannot check that the requirements resolve"
        )
    # --isolated: none of this machine's pip configuration (local wheel folders, mirrors) takes part
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--isolated",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--only-binary=:all:",
            "--index-url",
            PYPI,
            "--report",
            str(tmp_path / "report.json"),
            *pip_requirements(),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    import json

    chosen = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads((tmp_path / "report.json").read_text())["install"]
    }
    for requirement in pip_requirements():
        name, _, version = requirement.partition("==")
        assert chosen[name.lower()] == version, requirement
