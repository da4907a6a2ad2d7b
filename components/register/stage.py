"""Register an evaluated model in the MLflow registry and move its aliases.

Order of operations, each step safe to repeat (a re-run after a crash at any
point ends in the same state as an uninterrupted run):

1. key = SHA-256 of the checkpoint: one training output, one key;
2. a model version of NAME tagged with this key exists? reuse it;
   else reuse a logged model tagged with the key (a run that died after
   logging), else log the model (pyfunc, signature, input example, explicit
   pip requirements) in a new run; then create the version with its tags;
3. the logged files are checked against what was meant to be logged and
   sealed: their manifest's SHA-256 goes into the version's tags (see
   :mod:`components.register.integrity`: loaders verify it);
4. aliases: blessed -> ``previous`` on the old champion, ``champion`` on
   this version; not blessed and ``register_unblessed`` -> ``challenger``.
   A compare-and-set: ``@champion`` must still be the version evaluate compared
   the candidate with (decision.json's ``champion_version``); if another run
   moved it since, nothing moves and :class:`ChampionMoved` says so. (The
   pipeline holds the storage root's lock around this stage, so two runs'
   check-and-move cannot interleave.)

A not-blessed model is not registered at all unless asked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.common.progress import get_logger
from components.common.storage import atomic_write_json
from components.common.tracking import code_version, connect, ensure_experiment, sqlite_uri
from components.register.integrity import (
    DIGEST_TAG,
    MANIFEST_ARTIFACT,
    SIGNATURE_TAG,
    WEIGHTS_TAG,
    check_logged,
    seal,
)
from components.register.integrity import sha256_file as file_sha256
from components.register.registry import (
    CHALLENGER,
    CHAMPION,
    KEY_TAG,
    PREVIOUS,
    alias_version,
    model_uri,
)

log = get_logger(__name__)
REGISTRATION = "registration.json"
TAG_LIMIT = 4000  # MLflow caps tag values at 5000 characters
EXAMPLE_ROWS = 4


class ChampionMoved(RuntimeError):
    """``@champion`` is no longer the version the candidate was compared with."""


def default_tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite registry under ./runs (where `make run` keeps it)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri("runs")


@dataclass(frozen=True)
class RegisterConfig:
    """What to register, where, and under which name."""

    checkpoint: str
    """The candidate checkpoint that was evaluated."""
    metrics: str
    """The evaluate stage's metrics.json."""
    decision: str
    """The evaluate stage's decision.json."""
    model_name: str = "dailyrec"
    """Registered model name."""
    tracking_uri: str = dataclasses.field(default_factory=default_tracking_uri)
    """MLflow tracking + registry URI."""
    experiment: str = "dailyrec-register"
    """Experiment of the runs that log the models."""
    register_unblessed: bool = False
    """Register a not-blessed model too, under the ``challenger`` alias."""
    pipeline_run_id: str = ""
    """Recorded as a tag (the KFP run that produced the model)."""
    out: str | None = None
    """Folder for registration.json (optional)."""

    def __post_init__(self) -> None:
        for name in ("checkpoint", "metrics", "decision", "model_name", "tracking_uri", "experiment"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")


def register(config: RegisterConfig) -> dict:
    """Register (or find) the model version and set aliases; return registration.json's content."""
    started = time.perf_counter()
    from components.train.checkpoint import load_checkpoint

    metrics, decision = _read_json(config.metrics), _read_json(config.decision)
    blessed = bool(decision.get("blessed"))
    checkpoint = load_checkpoint(config.checkpoint)  # a clear error for a truncated file, before MLflow
    key = file_sha256(config.checkpoint)
    client = connect(config.tracking_uri)
    name = config.model_name
    result = {"model_name": name, "key": key, "blessed": blessed, "registered": False, "version": None,
              "aliases": [], "reused": False}
    version = find_version(client, name, key)
    if blessed:
        check_champion_unmoved(client, name, decision, version)
    if version is None and not (blessed or config.register_unblessed):
        result["reason"] = "not blessed; pass register_unblessed to register it as challenger"
        log.info("register: %s not blessed, nothing registered", config.checkpoint)
        return _finish(config, result, client, started)
    if version is None:
        _ensure_registered_model(client, name)
        source, run_id, model_id = _logged_model(client, config, checkpoint, metrics, decision, key)
        sealed, files = seal_logged(client, source, run_id, checkpoint)
        result["integrity"] = {**sealed, "manifest": files}
        version = client.create_model_version(
            name, source, run_id=run_id, model_id=model_id,
            tags={**version_tags(key, metrics, decision, checkpoint, config.pipeline_run_id), **sealed},
            description=f"test AUC {metrics.get('test_auc', float('nan')):.4f}; "
                        f"{'blessed' if blessed else 'not blessed'}")
        log.info("register: created %s version %s", name, version.version)
    else:
        result["reused"] = True
        log.info("register: %s version %s already holds this model (key %s)", name, version.version, key[:12])
    result.update(registered=True, version=int(version.version))
    if blessed:
        current = check_champion_unmoved(client, name, decision, version)
        if current is not None and current.version != version.version:
            client.set_registered_model_alias(name, PREVIOUS, current.version)
        client.set_registered_model_alias(name, CHAMPION, version.version)
    elif config.register_unblessed:
        client.set_registered_model_alias(name, CHALLENGER, version.version)
    return _finish(config, result, client, started)


def _finish(config: RegisterConfig, result: dict, client: Any, started: float) -> dict:
    name = config.model_name
    champion = alias_version(client, name, CHAMPION)
    previous = alias_version(client, name, PREVIOUS)
    result["champion_version"] = int(champion.version) if champion else None
    result["previous_version"] = int(previous.version) if previous else None
    if result["version"] is not None:
        mv = client.get_model_version(name, str(result["version"]))
        result["aliases"] = sorted(mv.aliases)
        result["model_uri"] = f"models:/{name}/{result['version']}"
        result.setdefault("integrity", {k: mv.tags.get(k) for k in (DIGEST_TAG, WEIGHTS_TAG, SIGNATURE_TAG)
                                        if k in mv.tags})
    result["champion_uri"] = model_uri(name, CHAMPION) if champion else None
    result["seconds"] = time.perf_counter() - started
    if config.out:
        atomic_write_json(Path(config.out) / REGISTRATION, result)
    return result


def check_champion_unmoved(client: Any, name: str, decision: dict, ours: Any | None) -> Any | None:
    """The current ``@champion`` (ModelVersion or None) if it is the one the decision was made against
    (or already ``ours``: a re-run after this registration moved it); :class:`ChampionMoved` otherwise."""
    current = alias_version(client, name, CHAMPION)
    now = int(current.version) if current is not None else None
    compared = decision.get("champion_version")
    if now == compared or (ours is not None and now == int(ours.version)):
        return current
    raise ChampionMoved(
        f"{name}@champion is v{now} now, but evaluate compared the candidate with "
        f"{f'v{compared}' if compared is not None else 'no champion'}: another run moved it since. "
        f"No alias moved; run the pipeline again to compare the candidate with v{now}")


def seal_logged(client: Any, source: str, run_id: str | None, checkpoint: dict,
                ) -> tuple[dict[str, str], dict[str, str]]:
    """Check the logged model at ``source`` against this code and the checkpoint, then seal it:
    ``(digest tags, manifest)``; the manifest is also stored with the registering run."""
    import mlflow

    import components

    with tempfile.TemporaryDirectory(prefix="dailyrec-seal-") as tmp:
        local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=tmp)
        check_logged(local, checkpoint, Path(__file__).with_name("model_code.py"),
                     Path(components.__file__).parent)
        sealed, files = seal(local)
    if run_id:
        client.log_dict(run_id, files, MANIFEST_ARTIFACT)
    return sealed, files


def find_version(client: Any, name: str, key: str) -> Any | None:
    """The model version of ``name`` tagged with ``key``, if one exists."""
    found = client.search_model_versions(f"name = '{_quote(name)}' and tags.{KEY_TAG} = '{key}'")
    return min(found, key=lambda mv: int(mv.version)) if found else None


def _ensure_registered_model(client: Any, name: str) -> None:
    try:
        client.create_registered_model(
            name, description="dailyrec click-through model (BST). Aliases: champion = serving, "
                              "previous = the champion before it, challenger = registered, not blessed.")
    except Exception as exc:
        if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
            raise


def _logged_model(client: Any, config: RegisterConfig, checkpoint: dict, metrics: dict, decision: dict,
                  key: str) -> tuple[str, str | None, str | None]:
    """``(source URI, run id, model id)`` of the logged model for ``key``: found or logged now."""
    import mlflow

    experiment_id = ensure_experiment(client, config.experiment, config.tracking_uri)
    previous = mlflow.search_logged_models(experiment_ids=[experiment_id], output_format="list",
                                           filter_string=f"tags.{KEY_TAG} = '{key}'")
    ready = [m for m in previous if str(m.status).endswith("READY")]
    if ready:
        model = ready[0]
        log.info("register: reusing logged model %s (an earlier attempt logged it)", model.model_id)
        return model.model_uri, model.source_run_id, model.model_id
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"register-{key[:8]}") as run:
        mlflow.set_tags({KEY_TAG: key, "pipeline_run_id": config.pipeline_run_id})
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()
                            if k.startswith("test_") and isinstance(v, int | float)})
        mlflow.log_dict(metrics, "evaluation/metrics.json")
        mlflow.log_dict(decision, "evaluation/decision.json")
        info = log_pyfunc(checkpoint, tags={KEY_TAG: key})
    return info.model_uri, run.info.run_id, info.model_id


def log_pyfunc(checkpoint: dict, tags: dict[str, str] | None = None) -> Any:
    """Log the model as an MLflow pyfunc (in the active run); returns the ModelInfo."""
    import mlflow
    import numpy as np

    import components
    from components.train.checkpoint import save_checkpoint
    from components.train.inference import CHECKPOINT_META_KEYS
    from components.train.model import Vocab

    vocab = Vocab(**checkpoint["vocab"])
    example = input_example(vocab, EXAMPLE_ROWS)
    with tempfile.TemporaryDirectory(prefix="dailyrec-register-") as tmp:
        # weights and self-description only: the optimizer state would triple the size
        slim = Path(tmp) / "model.pt"
        save_checkpoint(slim, {"model": checkpoint["model"],
                               **{k: checkpoint[k] for k in CHECKPOINT_META_KEYS if k in checkpoint}})
        output = np.zeros(EXAMPLE_ROWS, dtype=np.float32)
        signature = mlflow.models.infer_signature(example, output)
        return mlflow.pyfunc.log_model(
            name="model", python_model=str(Path(__file__).with_name("model_code.py")),
            artifacts={"checkpoint": str(slim)}, code_paths=[str(Path(components.__file__).parent)],
            signature=signature, input_example=example, pip_requirements=pip_requirements(), tags=tags)


def input_example(vocab: Any, rows: int) -> dict:
    """A few valid rows in the Dataset contract's dtypes (what the preprocess stage writes)."""
    import numpy as np

    from components.common.dataset import array_specs

    specs = array_specs(vocab.seq_len, vocab.neg_len)
    rng = np.random.default_rng(0)
    highs = {"hist_item": vocab.item, "target_item": vocab.item, "hist_cat": vocab.category,
             "target_cat": vocab.category, "user": vocab.user, "hist_gap": vocab.gap,
             "hist_len": vocab.seq_len + 1, "neg_item": vocab.item, "neg_cat": vocab.category,
             "neg_gap": vocab.gap, "neg_len": vocab.neg_len + 1}
    example = {}
    for key, high in highs.items():
        dtype, row_shape = specs[key]
        example[key] = rng.integers(0, high, size=(rows, *row_shape)).astype(dtype)
    dtype, row_shape = specs["dense"]
    example["dense"] = rng.standard_normal((rows, *row_shape)).astype(dtype)
    dtype, row_shape = specs["context"]
    example["context"] = np.stack([rng.integers(0, vocab.hour, rows), rng.integers(0, vocab.dow, rows)],
                                  axis=1).astype(dtype)
    return example


def pip_requirements() -> list[str]:
    """Pinned to what is running now (inferring them costs ~11 s per model)."""
    from importlib.metadata import version

    return [f"{package}=={version(package)}" for package in
            ("mlflow", "torch", "numpy", "pandas", "cloudpickle")]


def version_tags(key: str, metrics: dict, decision: dict, checkpoint: dict, run_id: str) -> dict[str, str]:
    """Lineage of a model version: data, code, plan, metrics, decision, pipeline run."""
    dataset = checkpoint.get("dataset") or {}
    tags = {
        KEY_TAG: key, "blessed": str(bool(decision.get("blessed"))).lower(),
        "decision_reasons": json.dumps(decision.get("reasons", [])),
        "champion_compared": str(decision.get("champion_version") or ""),
        "dataset_fingerprint": str(dataset.get("fingerprint") or ""),
        "dataset_window": json.dumps(dataset.get("window")),
        "model_config": str((checkpoint.get("model_config") or {}).get("name", "")),
        "plan": json.dumps(checkpoint.get("plan"), sort_keys=True),
        "code_version": code_version(), "pipeline_run_id": run_id,
    }
    for k in ("test_auc", "test_gauc", "test_logloss", "test_ece"):
        if isinstance(metrics.get(k), int | float):
            tags[k] = f"{metrics[k]:.6f}"
    return {k: v[:TAG_LIMIT] for k, v in tags.items()}


def _quote(value: str) -> str:
    return value.replace("'", "\\'")


def _read_json(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: not found") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return doc


def summary_line(result: dict) -> str:
    if not result["registered"]:
        return f"{result['model_name']}: nothing registered ({result.get('reason')})"
    return (f"{result['model_name']} version {result['version']}"
            f"{' (already registered)' if result['reused'] else ''}, aliases "
            f"{', '.join(result['aliases']) or 'none'}; champion = v{result['champion_version']}"
            + (f", previous = v{result['previous_version']}" if result["previous_version"] else ""))
