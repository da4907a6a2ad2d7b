"""The train stage's loader: sharded micro-batch sampling, batch gathering, loaders, errors."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from components.common.dataset import (
    SCHEMA_VERSION,
    SPLITS,
    DatasetError,
    array_specs,
    record_files,
)
from components.common.dataset_meta import DatasetMeta
from components.common.plan import TrainPlan
from components.train.data import (
    BATCH_SPEC,
    BatchDataset,
    ShardedBatchSampler,
    SplitArrays,
    eval_indices,
    make_eval_loader,
    make_loader,
)

SEQ_LEN = 5
NEG_LEN = 3
ROWS = {"train": 103, "val": 37, "test": 11}


def write_dataset(
    root: Path, rows: dict[str, int] = ROWS, seq_len: int = SEQ_LEN, seed: int = 0
) -> Path:
    """A dataset folder in the contract's format: one .npy per split and array, meta.json."""
    rng = np.random.default_rng(seed)
    specs = array_specs(seq_len, NEG_LEN)
    for split, n in rows.items():
        (root / split).mkdir(parents=True)
        for name, (dtype, row_shape) in specs.items():
            if np.dtype(dtype).kind == "f":
                values = rng.standard_normal((n, *row_shape)).astype(dtype)
            else:
                high = 2 if name == "label" else min(int(np.iinfo(dtype).max), 10**9)
                values = rng.integers(0, high, size=(n, *row_shape), endpoint=True).astype(dtype)
            np.save(root / split / f"{name}.npy", values)
    meta = {
        "schema_version": SCHEMA_VERSION,
        "seq_len": seq_len,
        "neg_len": NEG_LEN,
        "splits": {
            s: {"rows": n, "positives": 0, "positive_rate": 0.0, "days": ""}
            for s, n in rows.items()
        },
        "arrays": {name: {"dtype": d, "row_shape": list(t)} for name, (d, t) in specs.items()},
        "files": record_files(root),
    }
    (root / "meta.json").write_text(json.dumps(meta))
    return root


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "data")


def epoch_batches(n_rows, micro_batch, world_size, epoch=0, seed=0, skip=0, shuffle=True):
    """rank -> list of that rank's micro-batches for one epoch."""
    out = []
    for rank in range(world_size):
        sampler = ShardedBatchSampler(n_rows, micro_batch, world_size, rank, seed, shuffle)
        sampler.set_epoch(epoch, skip)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        out.append(batches)
    return out


# ----------------------------------------------------------------------------- sampler


@settings(max_examples=150, deadline=None)
@given(
    n_rows=st.integers(0, 300),
    micro_batch=st.integers(1, 17),
    world_size=st.integers(1, 6),
    epoch=st.integers(0, 5),
    shuffle=st.booleans(),
)
def test_every_row_once_per_epoch_with_equal_batch_counts_across_ranks(
    n_rows, micro_batch, world_size, epoch, shuffle
):
    per_rank = epoch_batches(n_rows, micro_batch, world_size, epoch, shuffle=shuffle)
    counts = {len(b) for b in per_rank}
    assert counts == {-(-n_rows // (micro_batch * world_size))}
    seen = np.concatenate([x for batches in per_rank for x in batches] + [np.empty(0, np.int64)])
    assert np.array_equal(np.sort(seen), np.arange(n_rows))
    for batches in per_rank:
        for i, batch in enumerate(batches):
            assert batch.dtype == np.int64 and batch.ndim == 1
            assert np.all(np.diff(batch) > 0), "indices within a micro-batch are sorted"
            assert len(batch) <= micro_batch
            if i < len(batches) - 1:
                assert len(batch) == micro_batch, "only the last micro-batch may be short"
    # rows of one global micro-batch are split as evenly as possible
    for i in range(len(per_rank[0])):
        sizes = [len(batches[i]) for batches in per_rank]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(n_rows=st.integers(0, 300), micro_batch=st.integers(1, 17), world_size=st.integers(1, 6))
def test_global_rows_sums_to_n_rows_and_matches_the_ranks_batch_sizes(
    n_rows, micro_batch, world_size
):
    per_rank = epoch_batches(n_rows, micro_batch, world_size, epoch=1)
    sampler = ShardedBatchSampler(n_rows, micro_batch, world_size, 0, seed=3)
    rows = sampler.global_rows(1)
    assert rows.sum() == n_rows
    assert rows.tolist() == [sum(len(b[i]) for b in per_rank) for i in range(len(rows))]
    assert len(rows) == len(sampler)


def test_fewer_rows_than_ranks_gives_empty_int64_batches():
    per_rank = epoch_batches(n_rows=3, micro_batch=4, world_size=5)
    assert [len(b) for b in per_rank] == [1] * 5
    sizes = sorted(len(b[0]) for b in per_rank)
    assert sizes == [0, 0, 1, 1, 1]
    empty = next(b[0] for b in per_rank if len(b[0]) == 0)
    assert empty.dtype == np.int64


def test_last_global_batch_shorter_than_world_size_leaves_some_ranks_empty():
    # 2 full global micro-batches of 2*3 rows, then 2 rows for 3 ranks
    per_rank = epoch_batches(n_rows=14, micro_batch=2, world_size=3)
    assert [len(b) for b in per_rank] == [3, 3, 3]
    assert [len(b[-1]) for b in per_rank] == [1, 1, 0]
    assert [len(b[0]) for b in per_rank] == [2, 2, 2]


def test_epochs_reshuffle_and_same_epoch_is_deterministic():
    first = epoch_batches(1000, 32, 2, epoch=0, seed=7)
    again = epoch_batches(1000, 32, 2, epoch=0, seed=7)
    second = epoch_batches(1000, 32, 2, epoch=1, seed=7)
    other_seed = epoch_batches(1000, 32, 2, epoch=0, seed=8)

    def flat(per_rank):
        return np.concatenate([x for batches in per_rank for x in batches])

    assert np.array_equal(flat(first), flat(again))
    assert not np.array_equal(flat(first), flat(second))
    assert not np.array_equal(flat(first), flat(other_seed))
    # the documented permutation, so every machine can reproduce it
    order = np.random.default_rng([7, 1]).permutation(1000)
    assert np.array_equal(second[1][0], np.sort(order[:64][1::2]))


def test_no_shuffle_keeps_row_order():
    (batches,) = epoch_batches(10, 4, 1, shuffle=False)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@settings(max_examples=80, deadline=None)
@given(
    n_rows=st.integers(0, 200),
    micro_batch=st.integers(1, 9),
    world_size=st.integers(1, 4),
    data=st.data(),
)
def test_skip_resumes_exactly_where_the_epoch_left_off(n_rows, micro_batch, world_size, data):
    full = epoch_batches(n_rows, micro_batch, world_size, epoch=2, seed=5)
    skip = data.draw(st.integers(0, len(full[0])))
    resumed = epoch_batches(n_rows, micro_batch, world_size, epoch=2, seed=5, skip=skip)
    for rank in range(world_size):
        before = full[rank][:skip]
        assert len(resumed[rank]) == len(full[rank]) - skip
        joined = before + resumed[rank]
        assert len(joined) == len(full[rank])
        assert all(np.array_equal(a, b) for a, b in zip(joined, full[rank], strict=True))


def test_set_epoch_rejects_skip_past_the_end():
    sampler = ShardedBatchSampler(10, 3)
    with pytest.raises(ValueError, match="skip"):
        sampler.set_epoch(0, skip=5)
    with pytest.raises(ValueError, match="rank"):
        ShardedBatchSampler(10, 3, world_size=2, rank=2)


@settings(max_examples=100, deadline=None)
@given(n_rows=st.integers(0, 500), world_size=st.integers(1, 9))
def test_eval_shards_are_contiguous_and_cover_every_row_once(n_rows, world_size):
    shards = [eval_indices(n_rows, world_size, r) for r in range(world_size)]
    expected = np.array_split(np.arange(n_rows), world_size)
    assert all(np.array_equal(a, b) for a, b in zip(shards, expected, strict=True))
    assert np.array_equal(np.concatenate(shards), np.arange(n_rows))


# ----------------------------------------------------------------------------- dataset


def test_batches_equal_direct_indexing_with_the_contract_dtypes(data_dir):
    dataset = BatchDataset(data_dir, "train", extra=("user_key",))
    assert len(dataset) == ROWS["train"]
    index = np.array([0, 3, 4, 50, 102])
    batch = dataset[index]
    assert set(batch) == {*BATCH_SPEC, "user_key"}
    for name, dtype in BATCH_SPEC.items():
        assert batch[name].dtype == dtype, name
        direct = np.load(data_dir / "train" / f"{name}.npy")[index]
        assert tuple(batch[name].shape) == direct.shape
        assert np.array_equal(batch[name].numpy(), direct.astype(batch[name].numpy().dtype)), name
    assert batch["hist_item"].shape == (5, SEQ_LEN) and batch["context"].shape == (5, 2)
    assert batch["label"].shape == (5,)
    assert batch["user_key"].dtype == torch.int64
    assert np.array_equal(
        batch["user_key"].numpy(), np.load(data_dir / "train" / "user_key.npy")[index]
    )
    plain = BatchDataset(data_dir, "train")
    assert "user_key" not in plain[index] and "ts" not in plain[index]


def test_gather_gives_raw_arrays_and_empty_batches_keep_their_shapes(data_dir):
    dataset = BatchDataset(data_dir, "val")
    raw = dataset.gather(np.array([1, 2]), keys=["user_key", "ts", "hist_gap"])
    assert raw["user_key"].dtype == np.int64 and raw["hist_gap"].dtype == np.uint8
    assert np.array_equal(raw["ts"], np.load(data_dir / "val" / "ts.npy")[[1, 2]])
    empty = dataset[np.empty(0, np.int64)]
    assert empty["hist_item"].shape == (0, SEQ_LEN) and empty["label"].shape == (0,)
    assert empty["label"].dtype == torch.float32


def test_dataset_pickles_without_its_mapped_data(data_dir):
    dataset = BatchDataset(data_dir, "train")
    _ = dataset[np.arange(4)]  # maps opened
    blob = pickle.dumps(dataset)
    data_bytes = sum(p.stat().st_size for p in (data_dir / "train").iterdir())
    assert data_bytes > 5_000 and len(blob) < 3_000, "worker pickles must not carry the arrays"
    copy = pickle.loads(blob)
    index = np.array([5, 9])
    assert all(torch.equal(copy[index][k], dataset[index][k]) for k in BATCH_SPEC)


# ----------------------------------------------------------------------------- loaders


def plan(**changes) -> TrainPlan:
    return TrainPlan(micro_batch=8, seed=11, num_workers=0, prefetch_factor=2).replace(**changes)


def loader_batches(data_dir, num_workers: int, epochs=(0, 1)):
    dataset = BatchDataset(data_dir, "train")
    sampler = ShardedBatchSampler(len(dataset), 8, world_size=2, rank=1, seed=11)
    loader = make_loader(dataset, sampler, plan(num_workers=num_workers), "cpu")
    out = []
    for epoch in epochs:  # persistent workers must follow set_epoch
        sampler.set_epoch(epoch)
        assert len(loader) == len(sampler)
        out.append(list(loader))
    return out


def test_worker_processes_give_the_same_batches_as_the_main_process(data_dir):
    main = loader_batches(data_dir, num_workers=0)
    workers = loader_batches(data_dir, num_workers=2)
    assert [len(e) for e in main] == [len(e) for e in workers] == [7, 7]
    for a_epoch, b_epoch in zip(main, workers, strict=True):
        for a, b in zip(a_epoch, b_epoch, strict=True):
            assert a.keys() == b.keys()
            assert all(
                torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype == BATCH_SPEC[k] for k in a
            )
    assert not torch.equal(main[0][0]["target_item"], main[1][0]["target_item"])


class SquaresDataset(torch.utils.data.Dataset):
    """Any dataset of batch dicts (not a BatchDataset) also works with workers."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, indices):
        index = torch.from_numpy(np.asarray(indices, np.int64))
        return {"x": index * index, "y": index.to(torch.float16)}


def test_workers_pass_other_datasets_batches_through_unchanged(data_dir):
    loader = make_loader(
        SquaresDataset(),
        ShardedBatchSampler(10, 4, shuffle=False),
        plan(num_workers=2, persistent_workers=False),
        "cpu",
    )
    batches = list(loader)
    assert [b["x"].tolist() for b in batches] == [[0, 1, 4, 9], [16, 25, 36, 49], [64, 81]]
    assert batches[0]["y"].dtype == torch.float16
    assert len(loader.dataset) == 10
    dataset = BatchDataset(data_dir, "train")
    wrapped = make_loader(dataset, ShardedBatchSampler(len(dataset), 4), plan(num_workers=1), "cpu")
    assert wrapped.dataset.meta is dataset.meta and len(wrapped.dataset) == len(dataset)
    pickle.loads(pickle.dumps(wrapped.dataset))


def test_the_loader_pin_thread_widens_and_pins_worker_batches(data_dir, monkeypatch):
    # CPU-only torch cannot pin: record the calls the DataLoader's pin thread would make.
    from torch.utils.data._utils.pin_memory import pin_memory

    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t, *a, **k: pinned.append(t) or t)
    dataset = BatchDataset(data_dir, "train", extra=("user_key",))
    index = np.array([2, 7, 8])
    batch = pin_memory(dataset.wire(index))
    assert isinstance(batch, dict) and len(pinned) == len(batch) == len(BATCH_SPEC) + 1
    expected = dataset[index]
    assert all(
        torch.equal(batch[k], expected[k]) and batch[k].dtype == expected[k].dtype for k in expected
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_creating_loader_iterators_leaves_the_global_torch_rng_alone(data_dir, num_workers):
    dataset = BatchDataset(data_dir, "train")
    sampler = ShardedBatchSampler(len(dataset), 16, seed=1)
    loader = make_loader(
        dataset, sampler, plan(num_workers=num_workers, persistent_workers=False), "cpu"
    )
    torch.manual_seed(123)
    before = torch.get_rng_state()
    for epoch in range(2):
        sampler.set_epoch(epoch)
        next(iter(loader))
    assert torch.equal(torch.get_rng_state(), before)
    eval_loader = make_eval_loader(dataset, np.arange(10), 4, plan(num_workers=num_workers), "cpu")
    list(eval_loader)
    assert torch.equal(torch.get_rng_state(), before)


def test_loader_options_follow_the_plan_and_device(data_dir):
    dataset = BatchDataset(data_dir, "train")
    sampler = ShardedBatchSampler(len(dataset), 8)
    cpu = make_loader(dataset, sampler, plan(num_workers=0, pin_memory=True), "cpu")
    assert cpu.batch_size is None and cpu.num_workers == 0 and not cpu.pin_memory
    assert not cpu.persistent_workers and cpu.prefetch_factor is None
    multi = make_loader(
        dataset, sampler, plan(num_workers=2, pin_memory=True, prefetch_factor=3), "cuda"
    )
    assert multi.pin_memory and multi.persistent_workers and multi.prefetch_factor == 3
    assert multi.generator is not None and multi.generator is not cpu.generator


def test_eval_loader_yields_sorted_contiguous_chunks_of_its_indices(data_dir):
    dataset = BatchDataset(data_dir, "val", extra=("user_key",))
    shard = eval_indices(len(dataset), world_size=2, rank=1)
    loader = make_eval_loader(dataset, shard[::-1], 5, plan(), "cpu")
    batches = list(loader)
    assert len(loader) == len(batches) == -(-len(shard) // 5)
    keys = np.load(data_dir / "val" / "user_key.npy")
    assert np.array_equal(np.concatenate([b["user_key"].numpy() for b in batches]), keys[shard])
    assert [len(b["label"]) for b in batches][:-1] == [5] * (len(batches) - 1)


# ----------------------------------------------------------------------------- errors


def test_a_valid_dataset_loads(data_dir):
    meta = DatasetMeta.read(data_dir)
    assert meta.schema_version == SCHEMA_VERSION
    for split in SPLITS:
        assert len(SplitArrays(data_dir, split, meta)) == ROWS[split]


def edit_meta(data_dir: Path, change) -> None:
    path = data_dir / "meta.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def test_wrong_schema_version_names_file_and_both_versions(data_dir):
    edit_meta(data_dir, lambda m: m.update(schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(DatasetError, match=rf"schema_version {SCHEMA_VERSION + 1}") as err:
        DatasetMeta.read(data_dir)
    message = str(err.value)
    assert str(data_dir / "meta.json") in message
    assert f"schema_version {SCHEMA_VERSION + 1}" in message
    assert f"reads schema_version {SCHEMA_VERSION};" in message


def test_dataset_of_the_previous_schema_asks_for_a_rebuild(data_dir):
    """A dataset written before count features and skipped exposures existed is refused
    with what to do, never read with a wrong layout."""
    edit_meta(data_dir, lambda m: m.update(schema_version=1))
    with pytest.raises(
        DatasetError, match=r"schema_version 1 is not supported .*run preprocess again"
    ):
        DatasetMeta.read(data_dir)
    with pytest.raises(DatasetError, match="schema_version"):
        BatchDataset(data_dir, "train")


def test_missing_or_unparsable_meta(tmp_path):
    with pytest.raises(DatasetError, match="meta.json: not found"):
        DatasetMeta.read(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(DatasetError, match="meta.json: unreadable"):
        DatasetMeta.read(tmp_path)


def test_meta_array_spec_differing_from_the_contract(data_dir):
    edit_meta(data_dir, lambda m: m["arrays"]["hist_item"].update(dtype="int64"))
    with pytest.raises(DatasetError, match=r"meta.json: field arrays.hist_item"):
        DatasetMeta.read(data_dir)


def test_missing_split_folder(data_dir):
    for path in (data_dir / "test").iterdir():
        path.unlink()
    (data_dir / "test").rmdir()
    DatasetMeta.read(data_dir, splits=("train",))  # only the requested splits must exist
    with pytest.raises(DatasetError, match="split folder missing") as err:
        DatasetMeta.read(data_dir)
    assert str(data_dir / "test") in str(err.value)
    meta = DatasetMeta.read(data_dir, splits=("train",))
    with pytest.raises(DatasetError, match=re.escape(str(data_dir / "test"))):
        SplitArrays(data_dir, "test", meta)


def test_missing_array_file(data_dir):
    (data_dir / "val" / "hist_gap.npy").unlink()
    with pytest.raises(
        DatasetError, match=re.escape(f"{data_dir / 'val' / 'hist_gap.npy'}: array")
    ):
        DatasetMeta.read(data_dir)
    with pytest.raises(DatasetError, match="array file missing") as err:
        BatchDataset(data_dir, "val")
    assert str(data_dir / "val" / "hist_gap.npy") in str(err.value)
    meta = DatasetMeta.read(data_dir, splits=("train",))
    with pytest.raises(DatasetError, match=re.escape(str(data_dir / "val" / "hist_gap.npy"))):
        SplitArrays(data_dir, "val", meta)


@pytest.mark.parametrize(
    ("name", "array", "problem"),
    [
        ("hist_item", np.zeros((ROWS["train"], SEQ_LEN), np.int64), "dtype int64"),
        ("hist_cat", np.zeros((ROWS["train"], SEQ_LEN + 1), np.int32), "shape"),
        ("context", np.zeros(ROWS["train"], np.uint8), "shape"),
        ("label", np.zeros(ROWS["train"] - 1, np.uint8), "rows"),
        ("user", np.zeros(ROWS["train"] + 1, np.int32), "rows"),
    ],
)
def test_array_not_matching_meta_names_the_file(data_dir, name, array, problem):
    path = data_dir / "train" / f"{name}.npy"
    np.save(path, array)
    with pytest.raises(DatasetError, match=problem) as err:
        BatchDataset(data_dir, "train")
    assert str(path) in str(err.value)


def test_corrupt_array_file_names_the_file(data_dir):
    path = data_dir / "train" / "ts.npy"
    path.write_bytes(b"not an npy file")
    with pytest.raises(DatasetError, match="not a readable .npy") as err:
        SplitArrays(data_dir, "train")
    assert str(path) in str(err.value)


def test_every_load_checks_the_sizes_preprocess_wrote_and_needs_its_record(data_dir):
    path = data_dir / "train" / "label.npy"
    with open(path, "ab") as fh:  # the header still reads: only the recorded size tells
        fh.write(b"\0" * 64)
    with pytest.raises(DatasetError, match="bytes, preprocess wrote") as err:
        BatchDataset(data_dir, "train")[np.arange(2)]
    assert str(path) in str(err.value)
    edit_meta(data_dir, lambda m: m.update(files=[]))
    with pytest.raises(DatasetError, match="field files is not an object"):
        DatasetMeta.read(data_dir)
