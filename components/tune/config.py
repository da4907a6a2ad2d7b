"""The search's settings: :class:`TuneConfig`, each field declared once with its description.

The CLI (``python -m components.tune``) builds a flag from every field; the dailyrec-tune
pipeline and its tune task take :data:`PIPELINE_PARAMETERS` as KFP parameters, their defaults
(:func:`pipeline_defaults`) and descriptions (:func:`pipeline_docs`) read from the fields, and
:func:`config_from_parameters` reads them back. A light module: no torch, no Optuna.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.plan import MEMORY_FRACTION
from components.tune.space import SearchSpace

PRUNERS = ("asha", "hyperband", "none")
SAMPLERS = ("tpe", "random")
STORAGES = ("sqlite", "memory")


@dataclass(frozen=True)
class TuneConfig:
    """One search. Every field is checked on construction."""

    data: str
    """Dataset folder written by the preprocess stage (train and val splits are used)."""
    out: str
    """Output folder: tuned.json, tune_summary.json, study.db, trials/."""
    base_model: str = "local"
    """Named model config or model config file the trials vary (heads, ffn ratio, MLP head kept)."""
    hardware: str = "cpu-local"
    """Hardware profile the trials are planned for (architectures must fit its memory)."""
    global_batch: int = 1024
    """Global batch of every trial (and the tuned lr's reference batch)."""
    max_epochs: int = 9
    """Most epochs a trial trains (the pruner's maximum resource)."""
    trials: int = 20
    """Finished (complete or pruned) trials to reach; a resumed search counts earlier ones."""
    pruner: str = field(default="asha", metadata={"choices": PRUNERS})
    """asha (SuccessiveHalvingPruner) | hyperband (HyperbandPruner) | none."""
    min_epochs: int = 1
    """The pruner's minimum resource: epochs before a trial can first be pruned."""
    reduction_factor: int = 4
    """The pruner's reduction factor: about 1 in this many trials moves to the next rung (4, as
    Optuna's and Ray Tune's ASHA defaults; benchmarks/tune.py compares 2, 3 and 4)."""
    sampler: str = field(default="tpe", metadata={"choices": SAMPLERS})
    """tpe | random (both seeded with `seed`)."""
    seed: int = 0
    """Sampler seed (training itself uses the plan's seed)."""
    space: SearchSpace = field(default_factory=SearchSpace)
    """What the trials may change."""
    enqueue: tuple[dict[str, Any], ...] = ()
    """(Partial) parameter sets tried first, in order, before the sampler proposes any."""
    tracking_uri: str | None = None
    """MLflow tracking URI; None (the default) = no tracking."""
    experiment: str = "dailyrec-tune"
    """MLflow experiment of the study and trial runs."""
    study_name: str = "dailyrec-tune"
    """Optuna study name (also the MLflow parent run's name)."""
    storage: str = field(default="sqlite", metadata={"choices": STORAGES})
    """sqlite (OUT/study.db: resumable) | memory."""
    timeout_hours: float | None = None
    """Start no new trial after this long; None (the default) = no limit."""
    memory_fraction: float = MEMORY_FRACTION
    """Share of device memory an architecture may plan to use (as the estimate stage)."""
    name: str = "tuned"
    """Name of the best config in tuned.json (recorded with checkpoints and runs)."""
    keep_checkpoints: bool = False
    """Keep every trial's best.pt / last.pt (they are large; off by default)."""

    def __post_init__(self) -> None:
        for name in ("global_batch", "max_epochs", "trials", "min_epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.reduction_factor, int) or self.reduction_factor < 2:
            raise ValueError(
                f"reduction_factor must be an integer >= 2, got {self.reduction_factor!r}"
            )
        if self.min_epochs > self.max_epochs:
            raise ValueError(
                f"min_epochs ({self.min_epochs}) must be <= max_epochs ({self.max_epochs})"
            )
        for name, allowed in (("pruner", PRUNERS), ("sampler", SAMPLERS), ("storage", STORAGES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.timeout_hours is not None and not (
            isinstance(self.timeout_hours, int | float) and self.timeout_hours > 0
        ):
            raise ValueError(f"timeout_hours must be > 0, got {self.timeout_hours!r}")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {self.memory_fraction!r}")
        if not isinstance(self.space, SearchSpace):
            raise ValueError("space must be a SearchSpace (SearchSpace.from_dict for JSON)")
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        enqueue = tuple(self.enqueue)
        for i, params in enumerate(enqueue):
            if not isinstance(params, dict):
                raise ValueError(f"enqueue[{i}] must be an object of parameters, got {params!r}")
            self.space.check_params(params, f"enqueue[{i}]")
        object.__setattr__(self, "enqueue", enqueue)

    def settings(self) -> dict[str, Any]:
        """What defines the study: a resumed search must have the same (trials, timeout may
        change)."""
        return {
            "data": str(Path(self.data).resolve()),
            "base_model": self.base_model,
            "hardware": self.hardware,
            "global_batch": self.global_batch,
            "max_epochs": self.max_epochs,
            "pruner": self.pruner,
            "min_epochs": self.min_epochs,
            "reduction_factor": self.reduction_factor,
            "sampler": self.sampler,
            "seed": self.seed,
            "space": self.space.as_dict(),
        }


PIPELINE_PARAMETERS = {
    "base_model": "base_model",
    "hardware_profile": "hardware",
    "global_batch": "global_batch",
    "max_epochs": "max_epochs",
    "trials": "trials",
    "pruner": "pruner",
    "min_epochs": "min_epochs",
    "reduction_factor": "reduction_factor",
    "sampler": "sampler",
    "seed": "seed",
    "search_space": "space",
    "enqueue": "enqueue",
    "timeout_hours": "timeout_hours",
    "tracking_uri": "tracking_uri",
}
"""The search settings the dailyrec-tune pipeline and its tune task take: parameter name ->
:class:`TuneConfig` field (hardware_profile and search_space keep the daily pipeline's names).
KFP parameters are plain values: search_space and enqueue are JSON text, and an empty text or
0 leaves a field whose default is None unset."""
PIPELINE_NOTES = {
    "search_space": "JSON text; empty = the built-in space.",
    "enqueue": "JSON list; empty = none.",
    "timeout_hours": "As a parameter: 0 = no limit.",
    "tracking_uri": "As a parameter: empty = none; the pipeline defaults to the cluster's MLflow.",
}
"""How a setting is written as a pipeline parameter, where it differs from the field."""


def pipeline_defaults() -> dict[str, Any]:
    """Each pipeline parameter's default: the field's, written as the parameter takes it."""
    import typing

    fields, hints = TuneConfig.__dataclass_fields__, typing.get_type_hints(TuneConfig)
    defaults = {}
    for param, name in PIPELINE_PARAMETERS.items():
        default = fields[name].default
        if param in ("search_space", "enqueue"):
            defaults[param] = ""  # the built-in space; nothing enqueued
        elif default is None:
            defaults[param] = 0.0 if float in typing.get_args(hints[name]) else ""
        else:
            defaults[param] = default
    return defaults


def pipeline_docs() -> dict[str, str]:
    """Each pipeline parameter's description: the field's docstring (and how it is written)."""
    from components.common.cli import field_docs

    docs = field_docs(TuneConfig)
    return {
        param: " ".join(filter(None, (docs[name], PIPELINE_NOTES.get(param))))
        for param, name in PIPELINE_PARAMETERS.items()
    }


def config_from_parameters(data: str, out: str, params: dict[str, Any]) -> TuneConfig:
    """The search that pipeline parameters (names of :data:`PIPELINE_PARAMETERS`; missing ones
    take the defaults) describe; bad values raise a ValueError naming the parameter."""

    def parsed(key: str) -> Any:
        try:
            return json.loads(params[key]) if params.get(key) else None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{key}: not valid JSON ({exc})") from None

    enqueue = parsed("enqueue") or []
    if not isinstance(enqueue, list):
        raise ValueError("enqueue: expected a JSON list of parameter objects")
    fields = TuneConfig.__dataclass_fields__
    given = {
        name: params[param] if fields[name].default is not None else params[param] or None
        for param, name in PIPELINE_PARAMETERS.items()
        if param in params and param not in ("search_space", "enqueue")
    }
    return TuneConfig(
        data=data,
        out=out,
        space=SearchSpace.from_dict(parsed("search_space")),
        enqueue=tuple(enqueue),
        **given,
    )
