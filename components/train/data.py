"""Batches from the preprocess stage's memmapped arrays (the Dataset contract).

A dataset folder holds ``meta.json`` and one ``.npy`` per array and split
(``DIR/{train,val,test}/<name>.npy``). Every array is opened with
``np.load(..., mmap_mode="r")`` and a batch is gathered with ONE fancy index per
array, so the loader does no per-sample Python work:

* :class:`ShardedBatchSampler` yields each rank's micro-batches as sorted index
  arrays (a whole micro-batch is one sampled item);
* :class:`BatchDataset` turns such an index array into the batch dict of the
  trainer's batch contract (:data:`BATCH_SPEC`);
* :func:`make_loader` / :func:`make_eval_loader` wrap both in a DataLoader with
  ``batch_size=None`` and a dedicated ``torch.Generator``, so creating an
  iterator never touches the global torch RNG.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from components.common.dataset import DatasetError
from components.common.dataset_meta import DatasetMeta
from components.common.plan import TrainPlan

BATCH_SPEC: dict[str, torch.dtype] = {
    "hist_item": torch.int64,  # [B, L]
    "hist_cat": torch.int64,  # [B, L]
    "hist_gap": torch.int64,  # [B, L]
    "hist_len": torch.int64,  # [B]
    "neg_item": torch.int64,  # [B, Ln]
    "neg_cat": torch.int64,  # [B, Ln]
    "neg_gap": torch.int64,  # [B, Ln]
    "neg_len": torch.int64,  # [B]
    "dense": torch.float32,  # [B, F]
    "target_item": torch.int64,  # [B]
    "target_cat": torch.int64,  # [B]
    "user": torch.int64,  # [B]
    "context": torch.int64,  # [B, 2]
    "label": torch.float32,  # [B]
}
"""The batch contract: name -> torch dtype of every training batch tensor."""

EXTRA_KEYS = ("user_key", "ts")
"""Arrays that are not model inputs but evaluation may ask for (as int64 tensors)."""


# ----------------------------------------------------------------------------- arrays


class SplitArrays:
    """Every array of one split, memory-mapped and checked against ``meta.json``.

    Picklable: the memory maps are not pickled but re-opened (and their shape and
    dtype re-checked) on first use in the receiving process.
    """

    def __init__(self, data_dir: str | Path, split: str, meta: DatasetMeta | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        self.meta = meta if meta is not None else DatasetMeta.read(self.data_dir, splits=(split,))
        self.rows = self.meta.split(split).rows
        specs = {
            name: (np.dtype(spec.dtype), spec.row_shape) for name, spec in self.meta.arrays.items()
        }
        self.specs = specs
        self._arrays: dict[str, np.ndarray] | None = None
        self._open()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.specs)

    def path(self, name: str) -> Path:
        return self.data_dir / self.split / f"{name}.npy"

    def _open(self) -> dict[str, np.ndarray]:
        folder = self.data_dir / self.split
        if not folder.is_dir():
            raise DatasetError(f"{folder}: split folder missing")
        arrays = {}
        for name, (dtype, row_shape) in self.specs.items():
            path = self.path(name)
            try:
                array = np.load(path, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError:
                raise DatasetError(f"{path}: array file missing") from None
            except (OSError, ValueError) as exc:
                raise DatasetError(f"{path}: not a readable .npy array ({exc})") from None
            if array.dtype != dtype:
                raise DatasetError(f"{path}: dtype {array.dtype}, meta.json says {dtype}")
            if array.ndim == 0 or tuple(array.shape[1:]) != row_shape:
                raise DatasetError(
                    f"{path}: shape {tuple(array.shape)}, meta.json says rows of shape {row_shape}"
                )
            if array.shape[0] != self.rows:
                raise DatasetError(
                    f"{path}: {array.shape[0]} rows, meta.json says "
                    f"splits.{self.split}.rows = {self.rows}"
                )
            # the cheap check of every load (the SHA-256 is checked where a run takes the
            # dataset in, components.common.dataset.verify_files); absent in a worker's copy
            written = self.meta.files.get(f"{self.split}/{name}.npy")
            if written is not None and path.stat().st_size != written.get("bytes"):
                raise DatasetError(
                    f"{path}: {path.stat().st_size} bytes, preprocess wrote {written.get('bytes')}: "
                    "changed since"
                )
            # A plain ndarray view of the map: fancy indexing skips np.memmap's overhead
            # and returns ordinary arrays (the view keeps the mapping alive).
            arrays[name] = array.view(np.ndarray)
        self._arrays = arrays
        return arrays

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return self._arrays if self._arrays is not None else self._open()

    def __len__(self) -> int:
        return self.rows

    def gather(
        self, indices: np.ndarray | Sequence[int], names: Iterable[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows ``indices`` of each array in ``names`` (default: all): one fancy index per array."""
        index = np.asarray(indices)
        if index.dtype.kind not in "iu":
            if index.size:
                raise TypeError(f"indices must be integers, got dtype {index.dtype}")
            index = index.astype(np.int64)
        arrays = self.arrays
        return {name: arrays[name][index] for name in (self.names if names is None else names)}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = None  # re-opened lazily; never pickle mapped data
        # nor the file digests (checked once, when the dataset was taken in)
        state["meta"] = dataclasses.replace(self.meta, files={}, document={})
        return state


# ----------------------------------------------------------------------------- dataset


class BatchDataset(Dataset):
    """Map-style dataset whose items are whole batches: ``dataset[indices]`` -> batch dict.

    The batch holds the tensors of :data:`BATCH_SPEC` (int64 ids ``[B, L]`` / ``[B]``,
    ``context`` ``[B, 2]``, float32 ``label`` ``[B]``) plus, as int64 ``[B]``, any
    of :data:`EXTRA_KEYS` asked for with ``extra=`` (e.g. ``("user_key",)`` for
    GAUC in evaluation).
    """

    def __init__(
        self,
        data_dir: str | Path,
        split: str,
        meta: DatasetMeta | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        unknown = [k for k in extra if k not in EXTRA_KEYS]
        if unknown:
            raise ValueError(f"extra keys must be among {EXTRA_KEYS}, got {unknown}")
        self.arrays = SplitArrays(data_dir, split, meta)
        self.extra = tuple(extra)
        self._spec = {**BATCH_SPEC, **dict.fromkeys(self.extra, torch.int64)}

    @property
    def meta(self) -> DatasetMeta:
        return self.arrays.meta

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        raw = self.arrays.gather(indices, self._spec)
        return {name: torch.from_numpy(raw[name]).to(dtype) for name, dtype in self._spec.items()}

    def wire(self, indices: np.ndarray) -> _WireBatch:
        """The batch in its compact contract dtypes, for sending from a loader worker."""
        return _WireBatch(self.arrays.gather(indices, self._spec), self._spec)

    def gather(
        self, indices: np.ndarray, keys: Iterable[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Raw arrays (contract dtypes, any key incl. ``user_key``/``ts``) of rows ``indices``."""
        return self.arrays.gather(indices, keys)


# ----------------------------------------------------------------------------- negative sampling

SAMPLING_CHUNK = 1 << 20
"""Rows hashed at a time when choosing the negatives to keep (bounded memory on any split)."""
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def row_uniform(user_key: np.ndarray, ts: np.ndarray, item: np.ndarray, seed: int) -> np.ndarray:
    """A uniform number in [0, 1) per row, a function of the row (user, time, item) and ``seed``
    only: SplitMix64's finalizer over the three mixed, so every process, rank and re-run draws
    the same number for the same row, whatever the order or the sharding."""
    with np.errstate(over="ignore"):
        h = (
            np.asarray(user_key).astype(np.uint64) * np.uint64(_GOLDEN)
            ^ np.asarray(ts).astype(np.uint64) * np.uint64(_MIX1)
            ^ np.asarray(item).astype(np.uint64) * np.uint64(_MIX2)
            ^ np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * np.uint64(_GOLDEN ^ _MIX1)
        )
        h = (h ^ (h >> np.uint64(30))) * np.uint64(_MIX1)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(_MIX2)
        h ^= h >> np.uint64(31)
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def kept_rows(
    split: BatchDataset, negative_keep: float, seed: int, epoch: int = 0
) -> np.ndarray | None:
    """The rows of ``split`` epoch ``epoch`` trains on: every positive and ``round(negative_keep
    x negatives)`` of the negatives, those with the smallest :func:`row_uniform` draws under
    (``seed``, ``epoch``); sorted. None when every row is kept.

    Each epoch draws its negatives anew, so over epochs the model sees more of them than one fixed
    sample holds, while every epoch has the same number of rows (the sampler's steps, the learning
    rate schedule and a resume stay as they are)."""
    if negative_keep >= 1:
        return None
    positives, negatives, draws = [], [], []
    for start in range(0, len(split), SAMPLING_CHUNK):
        index = np.arange(start, min(start + SAMPLING_CHUNK, len(split)), dtype=np.int64)
        rows = split.gather(index, ("label", "user_key", "ts", "target_item"))
        clicked = rows["label"] > 0
        positives.append(index[clicked])
        negatives.append(index[~clicked])
        draw = row_uniform(
            rows["user_key"], rows["ts"], rows["target_item"], _epoch_seed(seed, epoch)
        )
        draws.append(draw[~clicked].astype(np.float32))  # 4 bytes a negative while choosing
    if not positives:
        return np.zeros(0, np.int64)
    negative, draw = np.concatenate(negatives), np.concatenate(draws)
    keep = int(round(negative_keep * len(negative)))
    chosen = (
        negative[np.argpartition(draw, keep - 1)[:keep]]
        if 0 < keep < len(negative)
        else (negative if keep else negative[:0])
    )
    return np.sort(np.concatenate([np.concatenate(positives), chosen]))


def _epoch_seed(seed: int, epoch: int) -> int:
    """Epoch 0 draws with ``seed`` itself; each later epoch with its own seed."""
    return seed if epoch == 0 else seed ^ ((epoch * _GOLDEN) & 0xFFFFFFFFFFFFFFFF)


class EpochRows:
    """The training rows of each epoch under a share of negatives kept (:func:`kept_rows`), the
    current epoch's kept so that a step of it never recomputes them."""

    def __init__(self, split: BatchDataset, negative_keep: float, seed: int) -> None:
        self.split, self.negative_keep, self.seed = split, negative_keep, seed
        self._epoch, self._rows = 0, kept_rows(split, negative_keep, seed, 0)
        if self._rows is None:
            raise ValueError("EpochRows is for a share of negatives below 1")

    def __len__(self) -> int:
        """Rows per epoch (the same in every epoch)."""
        return len(self._rows)

    def __call__(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._epoch = epoch
            self._rows = kept_rows(self.split, self.negative_keep, self.seed, epoch)
        return self._rows


# ----------------------------------------------------------------------------- samplers


class ShardedBatchSampler(Sampler[np.ndarray]):
    """One rank's micro-batches of row indices, identical on every machine for (seed, epoch).

    Each epoch permutes all rows with ``np.random.default_rng([seed, epoch])``
    (``arange`` without shuffle), cuts the permutation into *global* micro-batches
    of ``micro_batch * world_size`` rows (the last may be smaller), and gives rank
    ``r`` the rows ``global[r::world_size]``, sorted (with ``rows``, a sample of the split's
    rows, or an :class:`EpochRows` giving each epoch's, the permutation is of those). So every row is seen exactly once per epoch across ranks, and every rank yields the same number of
    micro-batches (a rank's last one may be smaller, or empty when the last global
    micro-batch has fewer rows than ranks).
    """

    def __init__(
        self,
        n_rows: int,
        micro_batch: int,
        world_size: int = 1,
        rank: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        rows: np.ndarray | EpochRows | None = None,
    ) -> None:
        if rows is not None and len(rows) != n_rows:
            raise ValueError(f"rows holds {len(rows)} indices, n_rows says {n_rows}")
        if n_rows < 0:
            raise ValueError(f"n_rows must be >= 0, got {n_rows}")
        if micro_batch < 1 or world_size < 1:
            raise ValueError(
                f"micro_batch and world_size must be >= 1, got {micro_batch}, {world_size}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.n_rows = int(n_rows)
        self.micro_batch = int(micro_batch)
        self.world_size = int(world_size)
        self.rank = int(rank)
        self.seed = int(seed)
        self.shuffle = shuffle
        # the split's rows trained on (a sample of them, or each epoch's sample); None: all
        self.rows = rows
        self.epoch = 0
        self.skip = 0

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.world_size

    @property
    def batches_per_epoch(self) -> int:
        """Micro-batches per full epoch (per rank, and global micro-batches)."""
        return -(-self.n_rows // self.global_batch)

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Iterate epoch ``epoch``, leaving out its first ``skip`` micro-batches (a resume)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if not 0 <= skip <= self.batches_per_epoch:
            raise ValueError(f"skip must be in [0, {self.batches_per_epoch}], got {skip}")
        self.epoch = int(epoch)
        self.skip = int(skip)

    def order(self, epoch: int) -> np.ndarray:
        """All rows in epoch ``epoch``'s order (the same on every rank)."""
        if not self.shuffle:
            return np.arange(self.n_rows, dtype=np.int64)
        return np.random.default_rng([self.seed, epoch]).permutation(self.n_rows).astype(np.int64)

    def global_rows(self, epoch: int | None = None) -> np.ndarray:
        """Rows of each global micro-batch of ``epoch`` (default: the current), ignoring skip."""
        del epoch  # sizes do not depend on the epoch; the argument documents intent
        sizes = np.full(self.batches_per_epoch, self.global_batch, dtype=np.int64)
        if sizes.size:
            sizes[-1] = self.n_rows - self.global_batch * (sizes.size - 1)
        return sizes

    def __len__(self) -> int:
        return self.batches_per_epoch - self.skip

    def __iter__(self) -> Iterator[np.ndarray]:
        order = self.order(self.epoch)
        rows = self.rows(self.epoch) if isinstance(self.rows, EpochRows) else self.rows
        step = self.global_batch
        for start in range(self.skip * step, self.n_rows, step):
            mine = order[start : start + step][self.rank :: self.world_size]
            yield np.sort(mine if rows is None else rows[mine])


class ChunkSampler(Sampler[np.ndarray]):
    """The sorted ``indices`` in contiguous chunks of at most ``batch`` rows."""

    def __init__(self, indices: np.ndarray | Sequence[int], batch: int) -> None:
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self.indices = np.sort(np.asarray(indices, dtype=np.int64))
        self.batch = int(batch)

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch)

    def __iter__(self) -> Iterator[np.ndarray]:
        for start in range(0, len(self.indices), self.batch):
            yield self.indices[start : start + self.batch]


def eval_indices(n_rows: int, world_size: int = 1, rank: int = 0) -> np.ndarray:
    """Rank ``rank``'s contiguous share of ``n_rows`` (``np.array_split`` semantics)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    base, extra = divmod(n_rows, world_size)
    start = rank * base + min(rank, extra)
    return np.arange(start, start + base + (rank < extra), dtype=np.int64)


# ----------------------------------------------------------------------------- loaders


class _WireBatch:
    """A batch on its way from a loader worker: numpy arrays pickled by value, widened on arrival.

    Sending torch tensors between processes goes through a shared-memory file
    and a file-descriptor hand-over per tensor: on a 2-core machine about ten
    times slower than pickling the arrays through the worker's pipe. The arrays
    travel in their compact contract dtypes (int32/uint8, ~2.7x fewer bytes
    than int64), and the receiving side widens them to the batch contract:
    the main process (``tensors``), or the loader's pin thread, which also pins
    them (``pin_memory``, called by the DataLoader when pin_memory is on).
    """

    __slots__ = ("arrays", "dtypes")

    def __init__(self, arrays: dict[str, np.ndarray], dtypes: dict[str, torch.dtype]) -> None:
        self.arrays = arrays
        self.dtypes = dtypes

    def tensors(self) -> dict[str, torch.Tensor]:
        return {
            name: torch.from_numpy(array).to(self.dtypes[name])
            for name, array in self.arrays.items()
        }

    def pin_memory(self, device: Any = None) -> dict[str, torch.Tensor]:
        return {name: tensor.pin_memory() for name, tensor in self.tensors().items()}

    def __getstate__(self) -> tuple:
        return self.arrays, self.dtypes

    def __setstate__(self, state: tuple) -> None:
        self.arrays, self.dtypes = state


class _WireDataset(Dataset):
    """What loader workers index: ``base[indices]`` as a :class:`_WireBatch`.

    Other attributes (``meta``, ``arrays``, ``gather``, ...) are the base dataset's.
    """

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, indices: np.ndarray) -> _WireBatch:
        if isinstance(self.base, BatchDataset):
            return self.base.wire(indices)
        batch = self.base[indices]
        return _WireBatch(
            {k: v.numpy() for k, v in batch.items()}, {k: v.dtype for k, v in batch.items()}
        )

    def __getattr__(self, name: str) -> Any:
        if name == "base":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)


def _identity(item: Any) -> Any:
    """collate_fn of loader workers: the item is already a whole batch."""
    return item


class BatchLoader(DataLoader):
    """A DataLoader that yields batch dicts of tensors, whatever the worker transport."""

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for item in super().__iter__():
            yield item.tensors() if isinstance(item, _WireBatch) else item


def make_loader(
    dataset: Dataset, sampler: Sampler, plan: TrainPlan, device_type: str
) -> DataLoader:
    """A DataLoader whose every item is one whole batch ``dataset[sampler item]``.

    Uses its own ``torch.Generator`` (seeded from ``plan.seed``) for the worker
    base seed, so creating an iterator leaves the global torch RNG untouched.
    With workers, batches travel as pickled compact numpy arrays (see
    :class:`_WireBatch`), and ``loader.dataset`` is a thin wrapper of ``dataset``.
    """
    workers = plan.num_workers
    generator = torch.Generator()
    generator.manual_seed(plan.seed)
    extra: dict[str, Any] = {}
    if workers > 0:
        dataset = _WireDataset(dataset)
        extra = {
            "persistent_workers": plan.persistent_workers,
            "prefetch_factor": plan.prefetch_factor,
            "collate_fn": _identity,
        }
    return BatchLoader(
        dataset,
        batch_size=None,
        sampler=sampler,
        num_workers=workers,
        pin_memory=plan.pin_memory and device_type == "cuda",
        generator=generator,
        **extra,
    )


def make_eval_loader(
    dataset: Dataset,
    indices: np.ndarray | Sequence[int],
    batch: int,
    plan: TrainPlan,
    device_type: str,
) -> DataLoader:
    """A loader over the sorted ``indices`` in contiguous chunks of ``batch`` rows."""
    return make_loader(dataset, ChunkSampler(indices, batch), plan, device_type)
