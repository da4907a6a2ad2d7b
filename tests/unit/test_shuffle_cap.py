"""The disk shuffle's memory cap (components/preprocess/shuffle.py) against the installed dask and partd."""

from __future__ import annotations

import threading

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import partd
import pytest
from dask.dataframe.shuffle import maybe_buffered_partd

from components.preprocess import shuffle
from components.preprocess.shuffle import bounded_disk_shuffle, buffer_parameter

PARTD_DEFAULT = 1e9


def test_the_installed_partd_and_dask_still_offer_the_route():
    param = buffer_parameter()
    assert param is not None and param.name == "available_memory" and param.default == PARTD_DEFAULT
    # the Buffer Dask's disk shuffle builds is a partd.Buffer made with that default
    store = maybe_buffered_partd()()
    assert isinstance(store.partd, partd.Buffer) and store.partd.available_memory == PARTD_DEFAULT


def test_the_cap_holds_inside_nests_and_is_restored_after_an_error(tmp_path):
    with bounded_disk_shuffle(4 << 20, tmp_path / "a"):
        assert maybe_buffered_partd()().partd.available_memory == 4 << 20
        with bounded_disk_shuffle(1 << 20, tmp_path / "b"):  # the smaller cap wins while both run
            assert maybe_buffered_partd()().partd.available_memory == 1 << 20
        assert maybe_buffered_partd()().partd.available_memory == 4 << 20
        assert not (tmp_path / "b").exists()  # its spill folder went with it
    with pytest.raises(RuntimeError, match="boom"), bounded_disk_shuffle(2 << 20, tmp_path / "c"):
        raise RuntimeError("boom")
    assert (
        partd.Buffer(partd.Dict(), partd.File(str(tmp_path / "f"))).available_memory
        == PARTD_DEFAULT
    )
    assert shuffle._caps == []


def test_overlapping_shuffles_in_threads_restore_partds_default(tmp_path):
    go = threading.Barrier(4)

    def run(i):
        with bounded_disk_shuffle((i + 1) << 20, tmp_path / f"s{i}"):
            go.wait(timeout=10)
            assert maybe_buffered_partd()().partd.available_memory == 1 << 20
            go.wait(timeout=10)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert partd.Buffer.__init__.__defaults__ == (PARTD_DEFAULT,)


def test_a_real_disk_shuffle_keeps_under_the_cap_and_spills(tmp_path, monkeypatch):
    held = []
    real_append = partd.Buffer.append

    def append(self, data, lock=True, **kwargs):  # the real append, then what it kept in memory
        real_append(self, data, lock=lock, **kwargs)
        held.append((self.available_memory, self.memory_usage))

    monkeypatch.setattr(partd.Buffer, "append", append)
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"k": rng.integers(0, 64, 200_000), "v": rng.random(200_000)})  # ~3.2 MB
    cap = 256 << 10
    with bounded_disk_shuffle(cap, tmp_path / "spill"), dask.config.set(scheduler="threads"):
        out = (
            dd.from_pandas(frame, npartitions=8)
            .shuffle(on="k", npartitions=8, shuffle_method="disk")
            .compute()
        )
    assert held and {limit for limit, _ in held} == {cap}
    assert max(used for _, used in held) <= cap  # what exceeded it went to disk
    pd.testing.assert_frame_equal(
        out.sort_values(["k", "v"]).reset_index(drop=True),
        frame.sort_values(["k", "v"]).reset_index(drop=True),
    )
    assert not (tmp_path / "spill").exists()
