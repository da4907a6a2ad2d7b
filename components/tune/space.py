"""The search space: what a trial may change, and which architectures fit the hardware.

Six parameters, under the same names everywhere (Optuna, the Katib Experiment, the
trial CLI, the tuned file): ``lr`` (log-uniform), ``weight_decay`` (log-uniform),
``warmup_fraction``, ``dropout`` (uniform), ``d_model`` and ``layers`` (categorical).

A trial's model is the base config with ``d_model``, ``layers`` and ``dropout`` changed;
the feed-forward width keeps the base's ratio to ``d_model`` and the head count the base's
(or the largest divisor of ``d_model`` below it). Architectures are filtered with the
estimate stage's own memory model (``planner.largest_micro_batch``): only those that fit
under the hardware profile's memory cap *without activation checkpointing* at the base
plan's global batch and process count are searched, so every trial -- and the winner in
the daily pipeline -- plans without recomputation.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.common.plan import MEMORY_FRACTION

if TYPE_CHECKING:  # annotations only: the space is read where torch is not needed (pipelines)
    from components.common.plan import TrainPlan
    from components.estimate.hardware import HardwareProfile
    from components.train.model import ModelConfig, Vocab

PARAMS = ("lr", "weight_decay", "warmup_fraction", "dropout", "d_model", "layers")
"""Parameter names, in the order they are suggested."""
LOG_PARAMS = ("lr", "weight_decay")
CHOICE_PARAMS = ("d_model", "layers")


class SpaceError(ValueError):
    """An invalid search space, or one with no architecture that fits."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class SearchSpace:
    """Ranges ([low, high], inclusive) and choices of the six parameters. Defaults: the brief's."""

    lr: tuple[float, float] = (3e-4, 1e-2)
    """Peak learning rate at the plan's global batch; log-uniform, in (0, 1)."""
    weight_decay: tuple[float, float] = (1e-6, 1e-2)
    """AdamW weight decay of the dense weights; log-uniform, > 0."""
    warmup_fraction: tuple[float, float] = (0.0, 0.15)
    """Share of optimizer steps in linear warmup; uniform, in [0, 1)."""
    dropout: tuple[float, float] = (0.0, 0.3)
    """Dropout of the embeddings and encoder layers; uniform, in [0, 1)."""
    d_model: tuple[int, ...] = (16, 32, 64)
    """Encoder widths to try (filtered by memory)."""
    layers: tuple[int, ...] = (1, 2, 3)
    """Encoder depths to try (filtered by memory)."""

    def __post_init__(self) -> None:
        for name in ("lr", "weight_decay", "warmup_fraction", "dropout"):
            value = getattr(self, name)
            try:
                low, high = value
            except (TypeError, ValueError):
                raise SpaceError(f"space.{name} must be [low, high], got {value!r}") from None
            if not (_number(low) and _number(high)) or low > high:
                raise SpaceError(
                    f"space.{name} must be [low, high] numbers with low <= high, got {value!r}"
                )
            object.__setattr__(self, name, (float(low), float(high)))
        if not (self.lr[0] > 0 and self.lr[1] < 1):
            raise SpaceError(f"space.lr must lie in (0, 1), got {list(self.lr)}")
        if not self.weight_decay[0] > 0:
            raise SpaceError(
                f"space.weight_decay is log-uniform: low must be > 0, got {list(self.weight_decay)}"
            )
        for name in ("warmup_fraction", "dropout"):
            low, high = getattr(self, name)
            if not (low >= 0 and high < 1):
                raise SpaceError(f"space.{name} must lie in [0, 1), got {[low, high]}")
        for name in CHOICE_PARAMS:
            value = getattr(self, name)
            try:
                choices = tuple(value)
            except TypeError:
                raise SpaceError(
                    f"space.{name} must be a list of integers, got {value!r}"
                ) from None
            if (
                not choices
                or not all(
                    isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in choices
                )
                or len(set(choices)) != len(choices)
            ):
                raise SpaceError(
                    f"space.{name} must be a non-empty list of distinct integers >= 1, "
                    f"got {value!r}"
                )
            object.__setattr__(self, name, tuple(sorted(choices)))

    @classmethod
    def from_dict(cls, doc: dict[str, Any] | None) -> SearchSpace:
        """From JSON (lists for ranges and choices); missing keys keep their defaults."""
        if doc is None:
            return cls()
        if not isinstance(doc, dict):
            raise SpaceError(f"search space must be a JSON object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - set(PARAMS))
        if unknown:
            raise SpaceError(
                f"search space: unknown parameter {unknown[0]!r}; known: {', '.join(PARAMS)}"
            )
        return cls(**doc)

    def as_dict(self) -> dict[str, list]:
        return {name: list(getattr(self, name)) for name in PARAMS}

    def replace(self, **changes: Any) -> SearchSpace:
        return dataclasses.replace(self, **changes)

    def check_params(self, params: dict[str, Any], where: str = "params") -> None:
        """Refuse (partial) parameter values outside the space: an enqueued trial, a Katib value."""
        for name, value in params.items():
            if name not in PARAMS:
                raise SpaceError(f"{where}: unknown parameter {name!r}; known: {', '.join(PARAMS)}")
            allowed = getattr(self, name)
            if name in CHOICE_PARAMS:
                if value not in allowed:
                    raise SpaceError(f"{where}: {name}={value!r} is not one of {list(allowed)}")
            elif not (_number(value) and allowed[0] <= value <= allowed[1]):
                raise SpaceError(
                    f"{where}: {name}={value!r} is outside [{allowed[0]:g}, {allowed[1]:g}]"
                )


def trial_model(base: ModelConfig, params: dict[str, Any], name: str) -> ModelConfig:
    """The base architecture with a trial's d_model, layers and dropout (those absent stay)."""
    d_model = int(params.get("d_model", base.d_model))
    heads = next(h for h in range(min(base.heads, d_model), 0, -1) if d_model % h == 0)
    ffn = max(1, round(base.ffn * d_model / base.d_model))
    return base.replace(
        name=name,
        d_model=d_model,
        heads=heads,
        ffn=ffn,
        layers=int(params.get("layers", base.layers)),
        dropout=float(params.get("dropout", base.dropout)),
    )


@dataclass(frozen=True)
class Architectures:
    """The d_model and layers choices left after the memory filter, and why."""

    d_model: tuple[int, ...]
    layers: tuple[int, ...]
    rows: tuple[dict[str, Any], ...]
    """One row per candidate pair: d_model, layers, fits, micro_batch, peak_bytes, searched."""
    cap_bytes: float

    def table(self) -> str:
        lines = [
            f"architectures (memory cap {self.cap_bytes / 2**30:.2f} GiB, "
            "no activation checkpointing):"
        ]
        for r in self.rows:
            fit = (
                f"micro-batch {r['micro_batch']}, peak {r['peak_bytes'] / 2**30:.2f} GiB"
                if r["fits"]
                else "does not fit"
            )
            lines.append(
                f"  d_model {r['d_model']:>4} x layers {r['layers']}: {fit}"
                f"{'' if r['searched'] else '  (left out)'}"
            )
        return "\n".join(lines)


def feasible_architectures(
    space: SearchSpace,
    base: ModelConfig,
    vocab: Vocab,
    profile: HardwareProfile,
    plan: TrainPlan,
    memory_fraction: float = MEMORY_FRACTION,
) -> Architectures:
    """The d_model x layers grid reduced to the largest product of choices that all fit.

    Fit = the planner finds a micro-batch (``largest_micro_batch``, the estimate stage's
    memory model) under ``memory_fraction`` of the device without activation checkpointing,
    for the plan's global batch, process count, precision and loader, at the space's
    highest dropout (dropout masks cost memory). Memory grows with d_model and with layers,
    so the choices kept are the smallest i widths x the smallest j depths with every pair
    fitting and i x j largest (ties: more widths). Optuna and Katib then search a plain
    product of two categorical choices.
    """
    from components.estimate.planner import largest_micro_batch

    cap = memory_fraction * profile.memory_bytes
    world = plan.world_size
    per_process = plan.global_batch // world
    fits: dict[tuple[int, int], tuple[int, int] | None] = {}
    for d in space.d_model:
        for n in space.layers:
            config = trial_model(
                base, {"d_model": d, "layers": n, "dropout": space.dropout[1]}, "candidate"
            )
            found = largest_micro_batch(
                config,
                vocab,
                profile,
                cap,
                per_process,
                world,
                plan.precision,
                False,
                plan.num_workers,
                plan.prefetch_factor,
            )
            fits[d, n] = (found[0], int(found[1]["total"]["total"])) if found else None
    best = (0, 0)  # (how many of the smallest d_models, how many of the smallest depths)
    for i in range(1, len(space.d_model) + 1):
        for j in range(1, len(space.layers) + 1):
            if (i * j, i) > (best[0] * best[1], best[0]) and all(
                fits[d, n] is not None for d in space.d_model[:i] for n in space.layers[:j]
            ):
                best = (i, j)
    d_models, layers = space.d_model[: best[0]], space.layers[: best[1]]
    rows = tuple(
        {
            "d_model": d,
            "layers": n,
            "fits": fits[d, n] is not None,
            "micro_batch": fits[d, n][0] if fits[d, n] else None,
            "peak_bytes": fits[d, n][1] if fits[d, n] else None,
            "searched": d in d_models and n in layers,
        }
        for d in space.d_model
        for n in space.layers
    )
    result = Architectures(d_models, layers, rows, cap)
    if not d_models or not layers:
        raise SpaceError(
            f"no architecture of the search space fits {profile.name} without activation "
            f"checkpointing at global batch {plan.global_batch}:\n{result.table()}"
        )
    return result


def suggest(trial: Any, space: SearchSpace, archs: Architectures) -> dict[str, Any]:
    """The six parameters of an Optuna trial (enqueued values are taken as given)."""
    return {
        "lr": trial.suggest_float("lr", *space.lr, log=True),
        "weight_decay": trial.suggest_float("weight_decay", *space.weight_decay, log=True),
        "warmup_fraction": trial.suggest_float("warmup_fraction", *space.warmup_fraction),
        "dropout": trial.suggest_float("dropout", *space.dropout),
        "d_model": trial.suggest_categorical("d_model", list(archs.d_model)),
        "layers": trial.suggest_categorical("layers", list(archs.layers)),
    }


def json_arg(text: str | None, what: str) -> Any:
    """JSON given inline or as a file path; a ValueError names the flag."""
    if text is None:
        return None
    source = text
    if not text.lstrip().startswith(("{", "[")):
        try:
            source = Path(text).read_text()
        except OSError as exc:
            raise ValueError(f"{what}: cannot read {text} ({exc.strerror or exc})") from None
    try:
        return json.loads(source)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what}: not valid JSON ({exc})") from None
