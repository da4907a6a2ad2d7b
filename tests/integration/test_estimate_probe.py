"""The estimate's speed probe says what it is doing: it launches torchrun and times the trainer's
steps, which takes minutes on a big model, so a person sees it start and end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tools import ROOT

pytestmark = pytest.mark.integration


def test_the_speed_probe_shows_its_start_and_its_result(tiny_dataset, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.estimate",
            "--data",
            str(tiny_dataset),
            "--model",
            "debug",
            "--hardware",
            "cpu-local",
            "--probe",
            "--out",
            str(tmp_path / "plan.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    progress = [line for line in done.stderr.splitlines() if " PROGRESS " in line]
    started = [i for i, line in enumerate(progress) if "speed probe: timing" in line]
    ended = [i for i, line in enumerate(progress) if "samples/s per process" in line]
    assert started and ended and started[0] < ended[0], done.stderr[-2000:]
