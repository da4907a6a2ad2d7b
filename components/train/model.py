"""BST-style CTR model (Behaviour Sequence Transformer, Alibaba 2019).

One row = a user's right-aligned click history (item, category, time-gap
bucket per position; 0 = padding) plus a target item. The target is appended
as the last token; a pre-norm Transformer encoder runs over the L + 1 tokens
with the padded history positions masked out as keys; the target token's
output and a masked mean of the valid history outputs are concatenated with
the user, hour-of-day, day-of-week and raw target-item embeddings and three
dot products (user with target item and with target category, target output
with history mean), and an MLP maps them to one logit. Beside the sequence, as BST's "other features":

* the user's recent *skipped* exposures (shown, not clicked; ``neg_*``, up to
  ``Vocab.neg_len``), embedded like history tokens and pooled twice: by the
  target's attention and by their mean;
* recency-weighted matches: for the clicks and the skipped exposures, and for
  item and category, the sum over positions holding the target's id of a
  learned vector of that position's time gap (a learned decay kernel, so
  "clicked this category an hour ago" and "a week ago" weigh differently);
* the dense causal count features (``dense``: impressions, clicks and smoothed
  click rates so far per item, user, category and user x category; time since
  the user's last exposure and click), standardized with the training split's
  statistics (buffers saved with the weights).

Batch contract (a dict of tensors; the loader's int32/uint8/int16 arrays are
accepted and widened): ``hist_item``, ``hist_cat``, ``hist_gap`` [B, L],
``hist_len`` [B], ``neg_item``, ``neg_cat``, ``neg_gap`` [B, Ln], ``neg_len``
[B], ``dense`` float [B, F], ``target_item``, ``target_cat``, ``user`` [B],
``context`` [B, 2] (hour 0..23, day of week 0..6). ``label`` is ignored.
``L`` may be at most ``Vocab.seq_len`` (positions are counted from the most
recent click), ``Ln`` at most ``Vocab.neg_len``. A vocab with ``neg_len`` or
``dense`` 0 makes a model that takes none of those inputs.

Parameter counts of the named configs at their reference vocab
(``REFERENCE_VOCAB``; a unit test checks this table against
``count_parameters``). "embedding" = every embedding table (item, category,
time gap, positions, user, hour, day of week, match weights); "sparse" = the item and user
tables, the ones ``sparse=True`` makes sparse; "dense" = everything else
(encoder layers, final norm, MLP head).

    config  vocab                                                 embedding       sparse       dense        total
    debug   item 2**18 cat 2**12 user 2**18 gap 16 neg 10 L 20    4,227,852    4,194,304       7,561    4,235,413
    local   item 2**18 cat 2**12 user 2**18 gap 16 neg 10 L 20   16,910,344   16,777,216      57,345   16,967,689
    prod    item 2**20 cat 2**14 user 2**19 gap 16 neg 20 L 50  101,718,272  100,663,296   1,378,001  103,096,273

Sizing: ``local`` is for a CPU with a few cores at micro-batch ~1024; ``prod`` puts ~99% of
its ~103 M parameters in the item/user tables (400 MB fp32 + 800 MB of Adam state: comfortable
on an A100; with sparse tables only the rows a batch touches are updated). Sparse vs dense
tables, measured: docs/stages.md (Train).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from components.common.dataset import DENSE_FEATURES
from components.common.dataset_meta import DatasetMeta

__all__ = [
    "NAMED_CONFIGS",
    "REFERENCE_VOCAB",
    "MODEL_CONFIG_FORMAT",
    "BSTModel",
    "ModelConfig",
    "Vocab",
    "build_model",
    "count_parameters",
    "head_width",
    "model_config",
]

ACTIVATIONS = ("relu", "gelu")
DENSE_FREQUENCIES = 8  # per dense feature, in its periodic embedding
DENSE_FREQUENCY_STD = 0.5  # initial spread of those frequencies (features are standardized)
EMBEDDING_INIT_STD = 0.02
BATCH_KEYS = (
    "hist_item",
    "hist_cat",
    "hist_gap",
    "hist_len",
    "neg_item",
    "neg_cat",
    "neg_gap",
    "neg_len",
    "dense",
    "target_item",
    "target_cat",
    "user",
    "context",
)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a :class:`BSTModel` (vocabulary sizes come from :class:`Vocab`).

    Parameter counts at the reference vocab are in the module docstring.
    """

    name: str
    """Label recorded with checkpoints and runs."""
    d_model: int
    """Width of the token embeddings and the encoder (also the item/category/gap/position tables)."""
    layers: int
    """Transformer encoder layers."""
    heads: int
    """Attention heads; must divide d_model."""
    ffn: int
    """Hidden width of each encoder layer's feed-forward block."""
    dropout: float
    """Dropout of the token embeddings and inside the encoder layers; in [0, 1)."""
    mlp: tuple[int, ...]
    """Hidden sizes of the MLP head (may be empty: a linear head)."""
    user_dim: int | None = None
    """Width of the user embedding; None = d_model."""
    context_dim: int = 8
    """Width of the hour-of-day and day-of-week embeddings."""
    activation: str = "gelu"
    """relu | gelu, in the encoder's feed-forward blocks and the MLP head."""
    head_dropout: float | None = None
    """Dropout after each hidden layer of the MLP head; None = dropout."""
    dense_embed: int = 8
    """Width of each dense feature's periodic embedding (sin/cos of learned frequencies, then a
    per-feature linear map + ReLU; Gorishniy et al. 2022); 0 = the standardized values as they are."""
    match_dim: int = 4
    """Width of each recency-weighted match feature (target item / category found among the
    clicks / skipped exposures, weighted by a learned function of their time gap); 0 = none."""
    logit_shift: float = 0.0
    """Added to every logit: ``log r`` for a model trained on its negatives kept with probability
    ``r`` (``TrainPlan.negative_keep``), so that its probabilities are calibrated to all rows
    whoever scores them; 0 = trained on every row. Set by the trainer, not by a named config."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for name in ("d_model", "layers", "heads", "ffn", "context_dim"):
            if not _positive_int(getattr(self, name)):
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in ("match_dim", "dense_embed"):
            value = getattr(self, name)
            if not (_positive_int(value) or value == 0) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if self.user_dim is not None and not _positive_int(self.user_dim):
            raise ValueError(f"user_dim must be None or an integer >= 1, got {self.user_dim!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        for name in ("dropout", "head_dropout"):
            value = getattr(self, name)
            if value is None and name == "head_dropout":
                continue
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        try:
            mlp = tuple(self.mlp)
        except TypeError:
            raise ValueError(f"mlp must be a sequence of hidden sizes, got {self.mlp!r}") from None
        if not all(_positive_int(h) for h in mlp):
            raise ValueError(f"mlp hidden sizes must be integers >= 1, got {self.mlp!r}")
        object.__setattr__(self, "mlp", mlp)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if (
            not isinstance(self.logit_shift, int | float)
            or isinstance(self.logit_shift, bool)
            or not math.isfinite(self.logit_shift)
            or self.logit_shift > 0
        ):
            raise ValueError(f"logit_shift must be a finite number <= 0, got {self.logit_shift!r}")

    @property
    def user_width(self) -> int:
        return self.d_model if self.user_dim is None else self.user_dim

    @property
    def head_dropout_rate(self) -> float:
        return self.dropout if self.head_dropout is None else self.head_dropout

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)


NAMED_CONFIGS: dict[str, ModelConfig] = {
    # Tiny: unit/integration tests train it in seconds.
    "debug": ModelConfig(
        name="debug", d_model=8, layers=1, heads=2, ffn=16, dropout=0.1, mlp=(16,), context_dim=4
    ),
    # A 2-core laptop CPU at micro-batch ~1024. No dropout inside the encoder: on CPU its
    # Bernoulli masks cost ~25-30% of the samples/s (measured at 0.1); the head keeps 0.1.
    # The count features enter as they are (dense_embed 0): on MovieLens windows before the
    # benchmark's test weeks their periodic embedding lost AUC in every run (docs/quality.md).
    "local": ModelConfig(
        name="local",
        d_model=32,
        layers=2,
        heads=2,
        ffn=64,
        dropout=0.0,
        mlp=(128, 64),
        context_dim=8,
        head_dropout=0.1,
        dense_embed=0,
    ),
    # ~100 M parameters, almost all in the item/user tables; sized for A100s.
    "prod": ModelConfig(
        name="prod",
        d_model=64,
        layers=2,
        heads=4,
        ffn=256,
        dropout=0.1,
        mlp=(1024, 512, 256),
        context_dim=16,
    ),
}


MODEL_CONFIG_FORMAT = "dailyrec.model-config/v1"
"""Format of a model config file (written by the hyperparameter search, components/tune)."""


def model_config(name: str) -> ModelConfig:
    """The named config, or the ``"model"`` block of a JSON model config file (a path ending
    in ``.json``, e.g. the tuner's best config); a ValueError lists the valid names or names
    the file."""
    if isinstance(name, str) and name not in NAMED_CONFIGS and name.endswith(".json"):
        return _config_from_file(name)
    try:
        return NAMED_CONFIGS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown model config {name!r}; valid names: {', '.join(NAMED_CONFIGS)} "
            "(or the path of a .json model config file)"
        ) from None


def _config_from_file(path: str) -> ModelConfig:
    """Read on every call (cheap): a trial or a daily run always sees the file's content."""
    import json
    from pathlib import Path

    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"model config file {path} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"model config file {path}: unreadable ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != MODEL_CONFIG_FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise ValueError(
            f"model config file {path}: not a {MODEL_CONFIG_FORMAT} file (format {found!r})"
        )
    block = doc.get("model")
    if not isinstance(block, dict):
        raise ValueError(f'model config file {path}: no "model" object')
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(block) - known)
    if unknown:
        raise ValueError(f"model config file {path}: unknown field model.{unknown[0]}")
    try:
        return ModelConfig(**block)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"model config file {path}: {exc}") from None


@dataclass(frozen=True)
class Vocab:
    """Cardinalities of the model's inputs (from a dataset's ``meta.json``)."""

    item: int
    """Item hash buckets (bucket 0 = padding)."""
    category: int
    """Category hash buckets (bucket 0 = padding / unknown)."""
    user: int
    """User hash buckets."""
    gap: int
    """Time-gap buckets of the history (0 = padding); the model adds one "target" id."""
    seq_len: int
    """History length L the dataset was built with."""
    hour: int = 24
    """Hour-of-day values."""
    dow: int = 7
    """Day-of-week values."""
    neg_len: int = 0
    """Recent skipped exposures per row (0: the model takes none)."""
    dense: int = 0
    """Dense count features per row (0: the model takes none)."""
    id_key: str = ""
    """Fingerprint of the key the ids were hashed under (components.common.hashing; "" unknown):
    a model scores only ids hashed under its own key, which buckets alone would not tell."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "id_key":
                if not isinstance(value, str):
                    raise ValueError(f"vocab.id_key must be text, got {value!r}")
            elif f.name in ("neg_len", "dense"):
                if not (_positive_int(value) or value == 0) or isinstance(value, bool):
                    raise ValueError(f"vocab.{f.name} must be an integer >= 0, got {value!r}")
            elif not _positive_int(value):
                raise ValueError(f"vocab.{f.name} must be an integer >= 1, got {value!r}")

    @classmethod
    def from_meta(cls, meta: DatasetMeta | Mapping[str, Any]) -> Vocab:
        """The vocab of a dataset, from its meta.json (read, or as a document)."""
        if not isinstance(meta, DatasetMeta):
            meta = DatasetMeta.from_document(meta)
        buckets, context = meta.buckets, meta.context_features
        for section, values, keys in (
            ("buckets", buckets, ("item", "category", "user", "gap")),
            ("context_features", context, ("hour", "dow")),
            ("dense_features", meta.dense_features, ("names",)),
        ):
            missing = [k for k in keys if k not in values]
            if missing:
                raise ValueError(
                    f"{meta.source or 'meta.json'}: field {section}.{missing[0]} is missing "
                    "(not a dailyrec dataset meta?)"
                )
        return cls(
            item=int(buckets["item"]),
            category=int(buckets["category"]),
            user=int(buckets["user"]),
            gap=int(buckets["gap"]),
            seq_len=meta.seq_len,
            hour=int(context["hour"]),
            dow=int(context["dow"]),
            neg_len=meta.neg_len,
            dense=len(meta.dense_features["names"]),
            id_key=str(buckets.get("key_fingerprint", "")),
        )


# The preprocess defaults (PreprocessConfig: 2**18 / 2**12 / 2**18 buckets, 16 gaps, L 20).
_PREPROCESS_DEFAULTS = Vocab(
    item=1 << 18,
    category=1 << 12,
    user=1 << 18,
    gap=16,
    seq_len=20,
    neg_len=10,
    dense=len(DENSE_FEATURES),
)
REFERENCE_VOCAB: dict[str, Vocab] = {
    "debug": _PREPROCESS_DEFAULTS,
    "local": _PREPROCESS_DEFAULTS,
    # Production-sized hashing: fewer collisions on millions of items / users, longer history.
    "prod": Vocab(
        item=1 << 20,
        category=1 << 14,
        user=1 << 19,
        gap=16,
        seq_len=50,
        neg_len=20,
        dense=len(DENSE_FEATURES),
    ),
}


def head_width(config: ModelConfig, vocab: Vocab) -> int:
    """Inputs of the MLP head: target output, history mean, target item, user, hour, weekday,
    the dot products, and the skipped-exposure, match and dense-feature parts where present."""
    d = config.d_model
    width = 3 * d + config.user_width + 2 * config.context_dim
    width += 3 if config.user_width == d else 1
    sequences = 2 if vocab.neg_len else 1
    if vocab.neg_len:
        width += 2 * d
    width += 2 * sequences * config.match_dim
    if vocab.dense:
        width += vocab.dense * (config.dense_embed or 1)
    return width


def _activation(name: str) -> nn.Module:
    return nn.GELU() if name == "gelu" else nn.ReLU()


class BSTModel(nn.Module):
    """Behaviour Sequence Transformer: history + target tokens -> encoder -> pooled -> MLP -> logit.

    ``sparse=True`` makes the item and user tables produce sparse gradients
    (pair ``sparse_parameters()`` with ``torch.optim.SparseAdam`` and
    ``dense_parameters()`` with AdamW). ``activation_checkpointing=True``
    recomputes each encoder layer in backward while training.
    """

    def __init__(
        self,
        config: ModelConfig,
        vocab: Vocab,
        sparse: bool = False,
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        self.config = config
        self.vocab = vocab
        self.sparse = bool(sparse)
        self.activation_checkpointing = bool(activation_checkpointing)
        d = config.d_model
        self.target_gap = vocab.gap  # a dedicated gap id for the target token
        self.item_emb = nn.Embedding(vocab.item, d, padding_idx=0, sparse=self.sparse)
        self.cat_emb = nn.Embedding(vocab.category, d, padding_idx=0)
        self.gap_emb = nn.Embedding(vocab.gap + 1, d, padding_idx=0)
        # Row j < L: history column counted from the oldest; row L: the target token.
        self.position = nn.Parameter(torch.empty(vocab.seq_len + 1, d))
        self.user_emb = nn.Embedding(
            vocab.user, config.user_width, padding_idx=0, sparse=self.sparse
        )
        self.hour_emb = nn.Embedding(vocab.hour, config.context_dim)
        self.dow_emb = nn.Embedding(vocab.dow, config.context_dim)
        self.token_dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d,
                config.heads,
                config.ffn,
                config.dropout,
                activation=config.activation,
                batch_first=True,
                norm_first=True,
            )
            for _ in range(config.layers)
        )
        self.final_norm = nn.LayerNorm(d)
        # Explicit dot products (factorization-machine style): an MLP learns them poorly.
        self.user_dots = config.user_width == d
        if vocab.neg_len:  # skipped exposures: pooled by the target's attention and by their mean
            self.neg_position = nn.Parameter(torch.empty(vocab.neg_len, d))
        # Which sequences the target is matched in: the clicks, and the skipped exposures if any.
        self.match_sequences = ("hist", "neg") if vocab.neg_len else ("hist",)
        if config.match_dim:  # one learned recency weighting per (sequence, item | category)
            self.match_emb = nn.Embedding(
                2 * len(self.match_sequences) * (vocab.gap + 1), config.match_dim
            )
        if vocab.dense:  # standardized with the training split's statistics (set_dense_stats)
            self.register_buffer("dense_mean", torch.zeros(vocab.dense))
            self.register_buffer("dense_scale", torch.ones(vocab.dense))
            if config.dense_embed:
                self.dense_frequencies = nn.Parameter(
                    torch.randn(vocab.dense, DENSE_FREQUENCIES) * DENSE_FREQUENCY_STD
                )
                self.dense_weight = nn.Parameter(
                    torch.randn(vocab.dense, 2 * DENSE_FREQUENCIES, config.dense_embed)
                    / math.sqrt(2 * DENSE_FREQUENCIES)
                )
                self.dense_bias = nn.Parameter(torch.zeros(vocab.dense, config.dense_embed))
        width = head_width(config, vocab)
        head: list[nn.Module] = []
        for hidden in config.mlp:
            head += [
                nn.Linear(width, hidden),
                _activation(config.activation),
                nn.Dropout(config.head_dropout_rate),
            ]
            width = hidden
        head.append(nn.Linear(width, 1))
        self.head = nn.Sequential(*head)
        self._init_embeddings()

    def _init_embeddings(self) -> None:
        with torch.no_grad():
            for table in self.embedding_tables().values():
                nn.init.normal_(table, std=EMBEDDING_INIT_STD)
            for module in (self.item_emb, self.cat_emb, self.gap_emb, self.user_emb):
                module.weight[module.padding_idx].zero_()

    def embedding_tables(self) -> dict[str, nn.Parameter]:
        """Every embedding table by name (including the position table)."""
        tables = {
            "item": self.item_emb.weight,
            "category": self.cat_emb.weight,
            "gap": self.gap_emb.weight,
            "position": self.position,
            "user": self.user_emb.weight,
            "hour": self.hour_emb.weight,
            "dow": self.dow_emb.weight,
        }
        if self.vocab.neg_len:
            tables["neg_position"] = self.neg_position
        if self.config.match_dim:
            tables["match"] = self.match_emb.weight
        return tables

    def sparse_parameters(self) -> list[nn.Parameter]:
        """Parameters with sparse gradients (the item and user tables when sparse=True, else [])."""
        return [self.item_emb.weight, self.user_emb.weight] if self.sparse else []

    def dense_parameters(self) -> list[nn.Parameter]:
        """Every other parameter (disjoint from sparse_parameters(); together: all)."""
        sparse = {id(p) for p in self.sparse_parameters()}
        return [p for p in self.parameters() if id(p) not in sparse]

    @torch.no_grad()
    def set_output_bias(self, positive_rate: float) -> None:
        """Start the logit at the base rate's log-odds (a calmer first epoch)."""
        rate = min(max(float(positive_rate), 1e-6), 1 - 1e-6)
        self.head[-1].bias.fill_(math.log(rate / (1 - rate)))

    @torch.no_grad()
    def set_dense_stats(self, mean: Any, std: Any) -> None:
        """Standardize the dense features with these per-column statistics (saved with the weights)."""
        if not self.vocab.dense:
            return
        mean = torch.as_tensor(mean, dtype=torch.float32)
        std = torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != (self.vocab.dense,) or std.shape != (self.vocab.dense,):
            raise ValueError(
                f"dense statistics must have {self.vocab.dense} columns, "
                f"got {tuple(mean.shape)} and {tuple(std.shape)}"
            )
        self.dense_mean.copy_(mean)
        self.dense_scale.copy_(1.0 / std.clamp(min=1e-3))

    def init_from_meta(self, meta: DatasetMeta) -> None:
        """Start from a dataset's statistics: the base rate and the dense features' mean/std."""
        self.set_output_bias(meta.split("train").positive_rate)
        with torch.no_grad():  # the output (bias + shift) starts at the base rate
            self.head[-1].bias.sub_(self.config.logit_shift)
        if self.vocab.dense:
            stats = meta.dense_features
            self.set_dense_stats(stats["mean"], stats["std"])

    def _dense(self, dense: torch.Tensor) -> torch.Tensor:
        """[B, F * (dense_embed or 1)]: the standardized count features, embedded if configured."""
        x = (dense.float() - self.dense_mean) * self.dense_scale
        if not self.config.dense_embed:
            return x
        angles = 2 * math.pi * x.unsqueeze(-1) * self.dense_frequencies  # [B, F, K]
        periodic = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
        embedded = torch.einsum("bfk,fkm->bfm", periodic, self.dense_weight) + self.dense_bias
        return torch.relu(embedded).flatten(1)

    def _matches(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, 2 * sequences * match_dim]: for each sequence and for item / category, the sum over
        positions holding the target's id of a learned vector of that position's time gap."""
        out = []
        kind = 0
        for sequence in self.match_sequences:
            gap = batch[f"{sequence}_gap"].long()
            length = gap.shape[1]
            valid = torch.arange(length, device=gap.device).unsqueeze(0) >= (
                length - batch[f"{sequence}_len"].long().clamp(0, length)
            ).unsqueeze(1)
            gap = gap.clamp(0, self.vocab.gap) * valid
            for field, target in (("item", "target_item"), ("cat", "target_cat")):
                ids = batch[f"{sequence}_{field}"].long()
                match = (ids == batch[target].long().unsqueeze(1)) & valid
                vectors = self.match_emb(gap + kind * (self.vocab.gap + 1))
                out.append((vectors * match.unsqueeze(-1)).sum(dim=1))
                kind += 1
        return torch.cat(out, dim=1)

    def _skipped(self, batch: dict[str, torch.Tensor], query: torch.Tensor) -> torch.Tensor:
        """[B, 2d]: the skipped exposures pooled by attention from ``query`` and by their mean."""
        neg_item = batch["neg_item"].long()
        length = neg_item.shape[1]
        if length > self.vocab.neg_len:
            raise ValueError(
                f"skipped-exposure length {length} exceeds the model's neg_len {self.vocab.neg_len}"
            )
        tokens = (
            self.item_emb(neg_item)
            + self.cat_emb(batch["neg_cat"].long())
            + self.gap_emb(batch["neg_gap"].long())
            + self.neg_position[self.vocab.neg_len - length :]
        )
        columns = torch.arange(length, device=tokens.device)
        valid = columns.unsqueeze(0) >= (
            length - batch["neg_len"].long().clamp(0, length)
        ).unsqueeze(1)
        scores = (tokens @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(tokens.shape[-1])
        weights = torch.softmax(scores.masked_fill(~valid, -1e4), dim=1) * valid
        attended = (weights.unsqueeze(-1) * tokens).sum(dim=1)
        count = valid.sum(dim=1, keepdim=True).clamp(min=1).to(tokens.dtype)
        mean = (tokens * valid.unsqueeze(-1)).sum(dim=1) / count
        return torch.cat([attended, mean], dim=1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits float32 [B] (one per row)."""
        hist_item = batch["hist_item"].long()
        rows, length = hist_item.shape
        if length > self.vocab.seq_len:
            raise ValueError(
                f"history length {length} exceeds the model's seq_len {self.vocab.seq_len}"
            )
        hist_len = batch["hist_len"].long().clamp(0, length)
        target_item = batch["target_item"].long().unsqueeze(1)
        items = torch.cat([hist_item, target_item], dim=1)  # [B, L+1]: one lookup per table
        cats = torch.cat([batch["hist_cat"].long(), batch["target_cat"].long().unsqueeze(1)], dim=1)
        gaps = torch.cat(
            [batch["hist_gap"].long(), target_item.new_full((rows, 1), self.target_gap)], dim=1
        )
        item_vectors = self.item_emb(items)
        # Right-aligned: the most recent click always gets position seq_len - 1.
        positions = self.position[self.vocab.seq_len - length :]
        x = item_vectors + self.cat_emb(cats) + self.gap_emb(gaps) + positions
        x = self.token_dropout(x)

        columns = torch.arange(length + 1, device=x.device)
        padded = columns.unsqueeze(0) < (length - hist_len).unsqueeze(1)  # [B, L+1]; target never
        # MultiheadAttention cannot reshape a mask of an empty batch; nothing to mask there.
        mask = padded if rows else None
        checkpointing = self.training and self.activation_checkpointing and torch.is_grad_enabled()
        for layer in self.layers:
            if checkpointing:
                x = checkpoint(layer, x, src_key_padding_mask=mask, use_reentrant=False)
            else:
                x = layer(x, src_key_padding_mask=mask)
        x = self.final_norm(x)

        # Copies, not views: the dot products below would keep the whole [B, L+1, d] alive.
        target_out = x[:, -1].contiguous()
        target_vector = item_vectors[:, -1].contiguous()
        history = x[:, :length].masked_fill(padded[:, :length].unsqueeze(-1), 0.0)
        count = hist_len.clamp(min=1).unsqueeze(1).to(history.dtype)
        history_mean = history.sum(dim=1) / count
        context = batch["context"].long()
        user = self.user_emb(batch["user"].long())
        target_cat = self.cat_emb(cats[:, -1])
        scale = 1.0 / math.sqrt(x.shape[-1])
        dots = [(target_out * history_mean).sum(dim=1, keepdim=True) * scale]
        if self.user_dots:
            dots += [
                (user * target_vector).sum(dim=1, keepdim=True) * scale,
                (user * target_cat).sum(dim=1, keepdim=True) * scale,
            ]
        parts = [
            target_out,
            history_mean,
            target_vector,
            user,
            self.hour_emb(context[:, 0]),
            self.dow_emb(context[:, 1]),
            *dots,
        ]
        if self.vocab.neg_len:
            parts.append(self._skipped(batch, target_vector + target_cat))
        if self.config.match_dim:
            parts.append(self._matches(batch))
        if self.vocab.dense:
            parts.append(self._dense(batch["dense"]))
        features = torch.cat([part.to(target_out.dtype) for part in parts], dim=1)
        logits = self.head(features).squeeze(-1).float()
        return logits + self.config.logit_shift if self.config.logit_shift else logits


def _resolve(name_or_config: str | ModelConfig) -> ModelConfig:
    if isinstance(name_or_config, ModelConfig):
        return name_or_config
    return model_config(name_or_config)


def count_parameters(config: str | ModelConfig, vocab: Vocab) -> dict[str, int]:
    """{"embedding", "sparse", "dense", "total"} parameter counts (built on the meta device).

    "embedding": every embedding table; "sparse": the item and user tables
    (the ones sparse=True affects); "dense": everything that is not an
    embedding table; "total" = embedding + dense.
    """
    with torch.device("meta"):
        model = BSTModel(_resolve(config), vocab)
    tables = model.embedding_tables()
    embedding = sum(p.numel() for p in tables.values())
    total = sum(p.numel() for p in model.parameters())
    return {
        "embedding": embedding,
        "sparse": tables["item"].numel() + tables["user"].numel(),
        "dense": total - embedding,
        "total": total,
    }


def build_model(
    name_or_config: str | ModelConfig,
    vocab: Vocab,
    *,
    sparse: bool = False,
    activation_checkpointing: bool = False,
) -> BSTModel:
    """A freshly initialized model from a named config (or a ModelConfig) and a vocab."""
    return BSTModel(
        _resolve(name_or_config),
        vocab,
        sparse=sparse,
        activation_checkpointing=activation_checkpointing,
    )
