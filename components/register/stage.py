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
   :mod:`components.common.integrity`: loaders verify it);
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

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from components.common.dataset import DatasetError
from components.common.dataset_meta import DatasetMeta
from components.common.evaluation import DECISION, METRICS, Decision, Metrics
from components.common.integrity import (
    DIGEST_TAG,
    MANIFEST_ARTIFACT,
    PROFILE,
    SIGNATURE_TAG,
    WEIGHTS_TAG,
    check_logged,
    seal,
)
from components.common.integrity import sha256_file as file_sha256
from components.common.progress import get_logger
from components.common.registration import Registration
from components.common.registry import (
    CHALLENGER,
    CHAMPION,
    KEY_TAG,
    PIPELINE_RUN_TAG,
    PREVIOUS,
    alias_version,
    model_uri,
)
from components.common.registry_read import WINDOW_TAG, filter_literal, window_end
from components.common.stop import started_run
from components.common.storage import atomic_write_json
from components.common.tracking import (
    TrackingError,
    code_version,
    connect,
    ensure_experiment,
    redact,
    run_link,
)
from components.register.config import RegisterConfig

log = get_logger(__name__)
TAG_LIMIT = 4000  # MLflow caps tag values at 5000 characters
EXAMPLE_ROWS = 4
USER_STATE_TAG = "dailyrec_user_state"
ID_KEY_TAG = "dailyrec_id_key"
"""The fingerprint of the id key the version's ids were hashed under (docs/security.md)."""


class ChampionMoved(RuntimeError):
    """``@champion`` is no longer the version the candidate was compared with."""


def register(config: RegisterConfig) -> Registration:
    """Register (or find) the model version and set aliases; return what registration.json holds."""
    started = time.perf_counter()
    from components.train.checkpoint import load_checkpoint

    metrics, decision = Metrics.read(config.metrics), Decision.read(config.decision)
    blessed = decision.blessed
    checkpoint = load_checkpoint(
        config.checkpoint
    )  # a clear error for a truncated file, before MLflow
    key = file_sha256(config.checkpoint)
    client = connect(config.tracking_uri)
    name = config.model_name
    result = Registration(model_name=name, key=key, blessed=blessed)
    version = find_version(client, name, key)
    if blessed:
        check_champion_unmoved(client, name, decision, version)
    if version is None and not (blessed or config.register_unblessed):
        result = replace(
            result, reason="not blessed; pass register_unblessed to register it as challenger"
        )
        log.info("register: %s not blessed, nothing registered", config.checkpoint)
        return _finish(config, result, client, started)
    if version is None:
        _ensure_registered_model(client, name)
        source, run_id, model_id = _logged_model(client, config, checkpoint, metrics, decision, key)
        sealed, files = seal_logged(client, source, run_id, checkpoint)
        result = replace(result, integrity={**sealed, "manifest": files})
        lineage = run_links(client, config.checkpoint, metrics)
        version = client.create_model_version(
            name,
            source,
            run_id=run_id,
            model_id=model_id,
            tags={
                **version_tags(key, metrics, decision, checkpoint, config.pipeline_run_id, lineage),
                **sealed,
            },
            description=f"test AUC {metrics.test_auc:.4f}; "
            f"{'blessed' if blessed else 'not blessed'}" + describe_links(lineage),
        )
        log.info("register: created %s version %s", name, version.version)
    else:
        result = replace(result, reused=True)
        log.info(
            "register: %s version %s already holds this model (key %s)",
            name,
            version.version,
            key[:12],
        )
    result = replace(result, registered=True, version=int(version.version))
    move_aliases(client, config, decision, version)
    card = log_card(client, config, version, checkpoint, metrics, decision)
    return _finish(config, replace(result, model_card=card), client, started)


def move_aliases(client: Any, config: RegisterConfig, decision: Decision, version: Any) -> None:
    """A blessed version becomes ``@champion`` (the one it replaces ``@previous``); an unblessed one
    registered anyway ``@challenger``."""
    name = config.model_name
    if decision.blessed:
        current = check_champion_unmoved(client, name, decision, version)
        # a re-run of the champion's own day replaces it: @previous stays the last other day's
        # champion, so a rollback still reaches yesterday
        replaced = current is not None and current.version != version.version
        if replaced and not same_day(client, name, current, version):
            client.set_registered_model_alias(name, PREVIOUS, current.version)
        client.set_registered_model_alias(name, CHAMPION, version.version)
    elif config.register_unblessed:
        client.set_registered_model_alias(name, CHALLENGER, version.version)


def same_day(client: Any, name: str, current: Any, new: Any) -> bool:
    """Whether two versions were trained on windows ending the same day (a day run again)."""
    ends = [
        window_end(client.get_model_version(name, v.version).tags or {}) for v in (current, new)
    ]
    return ends[0] is not None and ends[0] == ends[1]


def log_card(
    client: Any,
    config: RegisterConfig,
    version: Any,
    checkpoint: dict,
    metrics: Metrics,
    decision: Decision,
) -> str | None:
    """Write the version's model card into its MLflow run (idempotent: a re-run rewrites the same
    card); its ``runs:/`` URI, or None when the version has no run."""
    from components.register.card import CARD_JSON, CARD_MD, build_card, markdown

    if not version.run_id:
        return None
    data = config.data or str(metrics.dataset.get("path") or "")
    try:
        meta = DatasetMeta.read(data, splits=()) if data else None
    except DatasetError:
        meta = None  # the card says what it knows; the version's tags keep the fingerprint
    mv = client.get_model_version(config.model_name, version.version)
    card = build_card(
        name=config.model_name,
        version=int(version.version),
        aliases=list(mv.aliases),
        meta=meta,
        metrics=metrics,
        decision=decision,
        checkpoint=checkpoint,
        lineage=run_links(client, config.checkpoint, metrics),
        pipeline_run_id=config.pipeline_run_id,
    )
    client.log_dict(version.run_id, card, CARD_JSON)
    client.log_text(version.run_id, markdown(card), CARD_MD)
    return f"runs:/{version.run_id}/{CARD_MD}"


def _finish(
    config: RegisterConfig, result: Registration, client: Any, started: float
) -> Registration:
    name = config.model_name
    champion = alias_version(client, name, CHAMPION)
    previous = alias_version(client, name, PREVIOUS)
    result = replace(
        result,
        champion_version=int(champion.version) if champion else None,
        previous_version=int(previous.version) if previous else None,
        champion_uri=model_uri(name, CHAMPION) if champion else None,
    )
    if result.version is not None:
        mv = client.get_model_version(name, str(result.version))
        result = replace(
            result,
            aliases=tuple(sorted(mv.aliases)),
            model_uri=f"models:/{name}/{result.version}",
            # a version found, not created now: its digests from its tags
            integrity=result.integrity
            or {
                k: mv.tags.get(k) for k in (DIGEST_TAG, WEIGHTS_TAG, SIGNATURE_TAG) if k in mv.tags
            },
        )
    result = replace(result, seconds=time.perf_counter() - started)
    if config.out:
        result.write(config.out)
    return result


def check_champion_unmoved(
    client: Any, name: str, decision: Decision, ours: Any | None
) -> Any | None:
    """The current ``@champion`` (ModelVersion or None) if it is the one the decision was made against
    (or already ``ours``: a re-run after this registration moved it); :class:`ChampionMoved` otherwise."""
    current = alias_version(client, name, CHAMPION)
    now = int(current.version) if current is not None else None
    compared = decision.champion_version
    if now == compared or (ours is not None and now == int(ours.version)):
        return current
    raise ChampionMoved(
        f"{name}@champion is v{now} now, but evaluate compared the candidate with "
        f"{f'v{compared}' if compared is not None else 'no champion'}: another run moved it since. "
        f"No alias moved; run the pipeline again to compare the candidate with v{now}"
    )


def seal_logged(
    client: Any,
    source: str,
    run_id: str | None,
    checkpoint: dict,
) -> tuple[dict[str, str], dict[str, str]]:
    """Check the logged model at ``source`` against this code and the checkpoint, then seal it:
    ``(digest tags, manifest)``; the manifest is also stored with the registering run."""
    import mlflow

    import components

    with tempfile.TemporaryDirectory(prefix="dailyrec-seal-") as tmp:
        local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=tmp)
        check_logged(
            local,
            checkpoint,
            Path(__file__).with_name("model_code.py"),
            Path(components.__file__).parent,
        )
        sealed, files = seal(local)
    if run_id:
        client.log_dict(run_id, files, MANIFEST_ARTIFACT)
    return sealed, files


def find_version(client: Any, name: str, key: str) -> Any | None:
    """The model version of ``name`` tagged with ``key``, if one exists."""
    found = client.search_model_versions(
        f"name = {filter_literal(name)} and tags.{KEY_TAG} = {filter_literal(key)}"
    )
    return min(found, key=lambda mv: int(mv.version)) if found else None


def _ensure_registered_model(client: Any, name: str) -> None:
    try:
        client.create_registered_model(
            name,
            description="dailyrec click-through model (BST). Aliases: champion = serving, "
            "previous = the champion before it, challenger = registered, not blessed.",
        )
    except Exception as exc:
        if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
            raise


def _logged_model(
    client: Any,
    config: RegisterConfig,
    checkpoint: dict,
    metrics: Metrics,
    decision: Decision,
    key: str,
) -> tuple[str, str | None, str | None]:
    """``(source URI, run id, model id)`` of the logged model for ``key``: found or logged now.

    The model is logged on its training run (its source run, listed among the run's models, in
    the training experiment) and by a registering run that holds the evaluation it was judged
    by; without a training run (a checkpoint trained elsewhere) it lives in the registering
    run's experiment alone."""
    import mlflow
    from mlflow.entities import LoggedModelOutput

    experiment_id = ensure_experiment(client, config.experiment, config.tracking_uri)
    training = training_run(client, run_links(client, config.checkpoint, metrics))
    home = training.info.experiment_id if training else experiment_id
    snapshot = str(
        config.user_state
    ).lower()  # a model logged with another snapshot is another model
    previous = mlflow.search_logged_models(
        experiment_ids=sorted({home, experiment_id}),
        output_format="list",
        filter_string=f"tags.{KEY_TAG} = {filter_literal(key)} "
        f"and tags.{USER_STATE_TAG} = {filter_literal(snapshot)}",
    )
    ready = [m for m in previous if str(m.status).endswith("READY")]
    if ready:
        model = ready[0]
        log.info("register: reusing logged model %s (an earlier attempt logged it)", model.model_id)
        return model.model_uri, _registering_run(client, model), model.model_id
    data = snapshot_dataset(config, checkpoint, metrics)
    with started_run(experiment_id=experiment_id, run_name=f"register-{key[:8]}") as run:
        mlflow.set_tags(
            {
                KEY_TAG: key,
                "pipeline_run_id": config.pipeline_run_id,
                **{k: v for k, v in run_links(client, config.checkpoint, metrics).items() if v},
            }
        )
        mlflow.log_metrics({k: float(v) for k, v in metrics.numbers().items()})
        mlflow.log_dict(metrics.to_document(), f"evaluation/{METRICS}")
        mlflow.log_dict(decision.to_document(), f"evaluation/{DECISION}")
        logged = mlflow.initialize_logged_model(
            name="model",
            source_run_id=training.info.run_id if training else run.info.run_id,
            tags={KEY_TAG: key, USER_STATE_TAG: snapshot, REGISTERING_RUN_TAG: run.info.run_id},
            experiment_id=home,
        )
        info = log_pyfunc(
            checkpoint,
            data,
            user_state=config.user_state,
            profile=metrics.data_profile,
            model_id=logged.model_id,
        )
        if training:  # listed on the training run's page, as a model it produced
            client.log_outputs(training.info.run_id, [LoggedModelOutput(logged.model_id, step=0)])
    return info.model_uri, run.info.run_id, info.model_id


REGISTERING_RUN_TAG = "dailyrec_registering_run"
"""A logged model's tag naming the run that logged it (and holds its evaluation and manifest)."""


def training_run(client: Any, lineage: dict[str, str]) -> Any | None:
    """The checkpoint's training run, when this tracking server holds it."""
    if not lineage.get("training_run"):  # no id, or a run this server does not know
        return None
    return client.get_run(lineage["training_run_id"])


def _registering_run(client: Any, model: Any) -> str | None:
    return (model.tags or {}).get(REGISTERING_RUN_TAG) or model.source_run_id


def snapshot_dataset(config: RegisterConfig, checkpoint: dict, metrics: Metrics) -> str:
    """The dataset folder whose snapshot the model carries: ``config.data``, else the evaluated one;
    refused unless it is the dataset the checkpoint was trained on (same fingerprint)."""
    data = config.data or str(metrics.dataset.get("path") or "")
    if not data:
        raise ValueError(
            f"{config.metrics}: names no dataset; pass data (the dataset the model was "
            f"trained on: its snapshot goes into the model)"
        )
    meta = DatasetMeta.read(data, splits=())
    trained_on = (checkpoint.get("dataset") or {}).get("fingerprint")
    if trained_on and meta.fingerprint != trained_on:
        raise ValueError(
            f"{data}: fingerprint {str(meta.fingerprint)[:12]} is not the one the "
            f"checkpoint was trained on ({trained_on[:12]}); its snapshot would not match"
        )
    return data


def log_pyfunc(
    checkpoint: dict,
    data: str,
    user_state: bool = True,
    profile: dict | None = None,
    model_id: str | None = None,
) -> Any:
    """Log the model as an MLflow pyfunc (in the active run), with the snapshot of dataset ``data``
    (without its users' state unless ``user_state``) and the profile of its training window
    (what the next days' data guards compare with); returns the ModelInfo."""
    import mlflow

    import components
    from components.score.features import write_snapshot
    from components.train.checkpoint import save_checkpoint
    from components.train.inference import CHECKPOINT_META_KEYS

    with tempfile.TemporaryDirectory(prefix="dailyrec-register-") as tmp:
        # weights and self-description only: the optimizer state would triple the size
        slim = Path(tmp) / "model.pt"
        save_checkpoint(
            slim,
            {
                "model": checkpoint["model"],
                **{k: checkpoint[k] for k in CHECKPOINT_META_KEYS if k in checkpoint},
            },
        )
        snapshot = write_snapshot(data, Path(tmp) / "snapshot")
        if not user_state:
            snapshot.pop("user_state")
        if profile is not None:  # aggregates only: counts, rates, quantiles, top id buckets
            name = Path(PROFILE).name
            snapshot[Path(PROFILE).stem] = atomic_write_json(Path(tmp) / name, profile)
        return mlflow.pyfunc.log_model(
            name="model",
            python_model=str(Path(__file__).with_name("model_code.py")),
            artifacts={"checkpoint": str(slim), **{k: str(v) for k, v in snapshot.items()}},
            code_paths=[str(Path(components.__file__).parent)],
            signature=request_signature(),
            input_example=input_example(EXAMPLE_ROWS),
            pip_requirements=pip_requirements(),
            model_id=model_id,
        )


def request_signature() -> Any:
    """The raw-id request's columns (any JSON type: ids may be text or integers; the model checks
    each value and answers a bad one with a one-line reason; ``user_id``, ``item_id`` and
    ``timestamp`` required), its ``params`` and the probability it returns."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types.schema import AnyType, ColSpec, ParamSchema, ParamSpec, Schema, TensorSpec

    from components.score.features import COLUMNS, REQUIRED
    from components.score.protocol import PARAMS

    return ModelSignature(
        inputs=Schema([ColSpec(AnyType(), c, required=c in REQUIRED) for c in COLUMNS]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1,))]),
        params=ParamSchema([ParamSpec(name, "long", p.default) for name, p in PARAMS.items()]),
    )


def input_example(rows: int) -> Any:
    """A few raw-id requests, each with its user's earlier events."""
    import pandas as pd

    day = 1_767_225_600  # 2026-01-01
    return pd.DataFrame(
        {
            "user_id": [f"user-{i}" for i in range(rows)],
            "item_id": [1000 + i for i in range(rows)],
            "category_id": [f"cat-{i % 2}" for i in range(rows)],
            "timestamp": [day + 3600 * (i + 1) for i in range(rows)],
            "events_item_id": [[2000 + i, 2001 + i] for i in range(rows)],
            "events_category_id": [["cat-0", "cat-1"] for _ in range(rows)],
            "events_timestamp": [[day + 60, day + 120] for _ in range(rows)],
            "events_label": [[1, 0] for _ in range(rows)],
        }
    )


def pip_requirements() -> list[str]:
    """Pinned to what is running now (inferring them costs ~11 s per model), without a local
    version label: ``torch==2.13.0+cpu`` is not on PyPI, ``torch==2.13.0`` is (on a CPU-only host,
    install with ``--extra-index-url https://download.pytorch.org/whl/cpu`` to skip the CUDA wheels)."""
    from importlib.metadata import version

    return [
        f"{package}=={version(package).split('+')[0]}"
        for package in ("mlflow", "torch", "numpy", "pandas", "pyarrow", "cloudpickle")
    ]


def run_links(client: Any, checkpoint: str, metrics: Metrics) -> dict[str, str]:
    """The MLflow runs of a model's training and its evaluation: their ids
    (``training_run_id``, ``evaluation_run_id``) and their pages in the MLflow UI
    (``training_run``, ``evaluation_run``: :func:`run_link`); empty values where a run is unknown."""
    from components.common.train_summary import TrainSummary

    summary = TrainSummary.beside(checkpoint)
    training = summary.mlflow_run_id if summary else None
    runs = {"training": training, "evaluation": metrics.mlflow_run_id}
    links = {}
    for what, run_id in runs.items():
        links[f"{what}_run_id"] = run_id or ""
        links[f"{what}_run"] = ""
        if run_id:
            experiment = _run_experiment(client, what, run_id)
            if experiment is not None:
                links[f"{what}_run"] = run_link(experiment, run_id)
    return links


class LineageError(TrackingError):
    """A model's training or evaluation run exists but cannot be read: the link would be lost."""


def _run_experiment(client: Any, what: str, run_id: str) -> str | None:
    """The experiment of run ``run_id``; None when this server has no such run (another server's,
    or deleted: the id alone is kept). Any other failure -- no permission to read it above all
    -- is an error: a version registered without its lineage would say nothing of why."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).info.experiment_id
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise LineageError(
            f"the {what} run {run_id} cannot be read ({exc.error_code}: "
            f"{redact(str(exc.message))[:200]}): the model version would lose its link to it; "
            f"give this account EDIT on the run's experiment (the model is logged on its "
            f"run there; python -m pipelines.accounts sets up the accounts and grants)"
        ) from None


def describe_links(lineage: dict[str, str]) -> str:
    """Markdown links (the MLflow UI renders version descriptions) to the training and evaluation runs."""
    parts = [
        f"[{what} run]({lineage[f'{what}_run']})"
        for what in ("training", "evaluation")
        if lineage.get(f"{what}_run")
    ]
    return ("; " + ", ".join(parts)) if parts else ""


DECISION_CHARS = 160
"""The ``decision`` tag's length: a line a person reads in the version list (all reasons are in
the model card)."""


def version_tags(
    key: str, metrics: Metrics, decision: Decision, checkpoint: dict, run_id: str, lineage: dict
) -> dict[str, str]:
    """Lineage of a model version as tags a person scans (one short value each, no JSON): the
    verdict and why, test AUC and GAUC, the window, model, plan, dataset and code, and the runs
    that made it. Everything else (all reasons, every metric, the whole plan) is in the model
    card (:mod:`components.register.card`); tags starting ``dailyrec_`` are read by code."""
    dataset = checkpoint.get("dataset") or {}
    window = dataset.get("window") or {}
    reasons = "; ".join(decision.reasons)
    tags = {
        KEY_TAG: key,
        ID_KEY_TAG: str((checkpoint.get("vocab") or {}).get("id_key", "")),
        "blessed": str(decision.blessed).lower(),
        "decision": reasons
        if len(reasons) <= DECISION_CHARS
        else reasons[: DECISION_CHARS - 1] + "…",
        "compared_with": f"v{decision.champion_version}"
        if decision.champion_version
        else "no champion",
        WINDOW_TAG: f"{window['start']}..{window['end']}" if window.get("end") else "",
        "model": str((checkpoint.get("model_config") or {}).get("name", "")),
        "plan": plan_line(checkpoint.get("plan") or {}),
        "dataset": str(dataset.get("fingerprint") or "")[:12],
        "code": code_version(),
        PIPELINE_RUN_TAG: run_id,
        **{k: lineage[k] for k in ("training_run", "evaluation_run") if lineage.get(k)},
    }
    for k in ("test_auc", "test_gauc"):
        tags[k] = f"{metrics.numbers()[k]:.4f}"
    return {k: v[:TAG_LIMIT] for k, v in tags.items() if v}


def plan_line(plan: dict) -> str:
    """The training plan in a few words: ``2 processes x 1 node, fp32, micro-batch 512, 3 epochs``."""
    if not plan:
        return ""
    nodes, procs = plan.get("nnodes", 1), plan.get("nproc_per_node", 1)
    return (
        f"{procs} process{'es' if procs != 1 else ''} x {nodes} node{'s' if nodes != 1 else ''}, "
        f"{plan.get('precision', '?')}, micro-batch {plan.get('micro_batch', '?')}, "
        f"{plan.get('max_epochs', '?')} epochs"
    )
