"""The benchmark's pandas baseline must build the same rows as the Dask stage,
or the comparison in `make bench` would be between different jobs."""

import numpy as np
import pytest

from benchmarks.baseline_pandas import run_baseline
from components.preprocess.config import PreprocessConfig
from components.preprocess.stage import SPLITS, preprocess

pytestmark = pytest.mark.integration


def canonical(folder, split):
    arrays = {p.stem: np.load(p) for p in (folder / split).glob("*.npy")}
    order = np.lexsort(
        (
            arrays["label"],
            arrays["target_cat"],
            arrays["target_item"],
            arrays["ts"],
            arrays["user_key"],
        )
    )
    return {k: v[order] for k, v in arrays.items()}


def test_baseline_builds_the_same_arrays(raw_days, tmp_path):
    raw, _ = raw_days(days=6, rows=300)
    settings = {"days": 4, "history_days": 2, "seq_len": 5, "rows_per_partition": 300}
    preprocess(PreprocessConfig(raw=str(raw), out=str(tmp_path / "dask"), **settings))
    rows = run_baseline(PreprocessConfig(raw=str(raw), out=str(tmp_path / "pandas"), **settings))
    assert sum(rows.values()) > 0
    for split in SPLITS:
        a, b = canonical(tmp_path / "dask", split), canonical(tmp_path / "pandas", split)
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].dtype == b[name].dtype, name
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{split}/{name}")
