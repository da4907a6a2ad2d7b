"""datagen -> preprocess through the real CLIs, as `make run` does."""

import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_datagen_then_preprocess(tmp_path):
    gen = cli(
        "components.datagen",
        "--out",
        "raw",
        "--days",
        "5",
        "--users",
        "300",
        "--items",
        "800",
        "--categories",
        "40",
        "--events-per-day",
        "3000",
        "--seed",
        "3",
        "--id-format",
        "str",
        cwd=tmp_path,
    )
    assert gen.returncode == 0, gen.stderr
    pre = cli(
        "components.preprocess",
        "--raw",
        "raw",
        "--out",
        "ds",
        "--days",
        "4",
        "--history-days",
        "1",
        "--seq-len",
        "8",
        "--rows-per-partition",
        "2000",
        "--shuffle-buffer-mb",
        "16",
        cwd=tmp_path,
    )
    assert pre.returncode == 0, pre.stderr
    info = json.loads((tmp_path / "raw" / "_datagen.json").read_text())
    meta = json.loads((tmp_path / "ds" / "meta.json").read_text())
    # the sample's own marker files are passed over without a warning, and still accounted for
    warned = [line for line in pre.stderr.splitlines() if "WARNING" in line]
    assert not [w for w in warned if "_truth" in w or "_datagen" in w], pre.stderr
    assert {i["path"] for i in meta["inputs"]["ignored"]} == {"_truth", "_datagen.json"}
    assert meta["rows"]["read"] == info["rows_total"] == 15_000
    assert meta["rows"]["quarantined_total"] == 0
    # the summary reaches the user on stdout: one line per split, with the window days
    assert "train" in pre.stdout and "2026-01-02 .. 2026-01-03" in pre.stdout
    for split, day in (("val", "2026-01-04"), ("test", "2026-01-05")):
        assert meta["splits"][split]["rows"] == info["rows_per_day"][day]
        labels = np.load(tmp_path / "ds" / split / "label.npy", mmap_mode="r")
        assert (
            abs(labels.mean() - info["click_rate"][day]) < 1e-6
        )  # _datagen.json rounds to 6 places
    # generated sessions give clicks to build on: most test rows have a history
    hist_len = np.load(tmp_path / "ds" / "test" / "hist_len.npy")
    assert (hist_len > 0).mean() > 0.5
