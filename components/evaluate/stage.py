"""Evaluate a trained candidate on the test split and decide whether it may replace the champion.

Scores the candidate and the registry's current champion (``models:/NAME@champion``)
on the same test rows in one pass, computes AUC / GAUC / logloss / ECE for
both, scores the test rows again as serving builds them (:mod:`components.evaluate.served`:
the day's train-serve skew), compares the two models as served with users as the unit
(clustered DeLong), applies the gate of :mod:`components.evaluate.decision`, and writes,
atomically into ``out``:

* ``metrics.json``  – candidate and champion metrics, the comparison, the dataset;
* ``decision.json`` – blessed or not, with the reasons and the rule;
* ``roc.json``      – ROC curve points (thinned) of both models;
* ``report.md`` + ``roc.png`` + ``calibration.png`` – for humans.

With a tracking URI, the evaluation is also an MLflow run (experiment
``dailyrec-evaluate``: the metrics, the verdict as tags, these files as
artifacts); its id goes into ``metrics.json`` and register links the model
version to it. An evaluation that fails ends its run FAILED.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from components.common.dataset import DatasetError
from components.common.dataset_meta import DatasetMeta
from components.common.evaluation import DECISION, METRICS, Decision, Evaluation, Metrics
from components.common.progress import get_logger
from components.common.storage import atomic_dir, atomic_write_bytes, atomic_write_json
from components.evaluate import report
from components.evaluate.config import EXPERIMENT, EvaluateConfig
from components.evaluate.decision import decide
from components.evaluate.guards import (
    ProfileError,
    WindowProfile,
    WindowRows,
    run_guards,
    training_profile,
)
from components.evaluate.metrics import (
    calibration,
    clustered_auc,
    clustered_delong,
    roc_points,
    score_spread,
    summarize,
)
from components.train.inference import (
    check_inputs,
    load_scorer,
    predict_logits,
    sigmoid,
    split_rows,
)
from components.train.model import BATCH_KEYS, Vocab

log = get_logger(__name__)
ROC = "roc.json"


class EvaluateError(ValueError):
    """The candidate cannot be evaluated on this data; the message says which file and why."""


@dataclasses.dataclass
class TestScores:
    """The test split as both models scored it on the dataset's features: the labels, the
    users, the columns serving needs to rebuild each row, and each model's probabilities."""

    labels: np.ndarray
    users: np.ndarray
    match: dict[str, np.ndarray]
    candidate: np.ndarray
    champion: np.ndarray | None
    """None where there is no champion, or it could not score today's rows."""


@dataclasses.dataclass
class _DatasetSide:
    """Each model's test scores on the dataset's features, by model name (``candidate``,
    ``champion vN``): curves, calibration bins, predictions; the candidate's summary and the
    comparison of the two (None without a champion scored)."""

    candidate: dict
    curves: dict
    bins: dict
    predictions: dict
    comparison: dict | None = None


def _on_dataset_features(
    config: EvaluateConfig, scores, champion: dict
) -> tuple[_DatasetSide, dict]:
    """The metrics on the dataset's features; the champion gains its own when it was scored."""
    y, groups, prob = scores.labels, scores.users, scores.candidate
    side = _DatasetSide(
        candidate=summarize(prob, y, groups, config.bins),
        curves={"candidate": roc_points(prob, y)},
        bins={"candidate": calibration(prob, y, config.bins)["bins"]},
        predictions={"candidate": prob},
    )
    if scores.champion is not None:
        name = f"champion v{champion['version']}"
        champion = {**champion, "metrics": summarize(scores.champion, y, groups, config.bins)}
        side.comparison = clustered_delong(prob, scores.champion, y, groups, config.rule.confidence)
        side.curves[name] = roc_points(scores.champion, y)
        side.bins[name] = calibration(scores.champion, y, config.bins)["bins"]
        side.predictions[name] = scores.champion
    return side, champion


def _as_served(
    config: EvaluateConfig, meta, scores, candidate, champion_model, champion: dict, on_dataset
) -> tuple[dict, dict, dict | None]:
    """What each model scores as served (raw ids through its own state): ``(served summary,
    the candidate's served AUC, the comparison the gate judges)``. With a champion model that
    comparison is on served scores, and the champion gains its ``served_auc``; without, it is the
    comparison ``on_dataset`` features."""
    y, groups, confidence = scores.labels, scores.users, config.rule.confidence
    served = served_scores(
        config,
        meta,
        {"user_key": groups, "label": y, **scores.match},
        candidate,
        champion_model,
    )
    served_auc = clustered_auc(served["candidate"], y, groups, confidence)
    comparison = on_dataset
    if champion_model is not None:  # the gate judges what each model serves
        comparison = clustered_delong(
            served["candidate"], served["champion"], y, groups, confidence
        )
        champion["served_auc"] = comparison["auc_b"]
    summary = {
        "auc": served_auc["auc"],
        "auc_interval": served_auc,
        "skew": clustered_delong(scores.candidate, served["candidate"], y, groups, confidence),
        "snapshot_only_auc": clustered_auc(served["snapshot_only"], y, groups, confidence),
        "score_spread": score_spread(served["candidate"]),
    }
    return summary, served_auc, comparison


def evaluate(config: EvaluateConfig) -> Evaluation:
    """Score, compare, decide, write the outputs; return them."""
    started = time.perf_counter()
    import torch

    torch.set_num_threads(config.threads)
    meta, vocab, candidate = _candidate_and_data(config)
    with tempfile.TemporaryDirectory(prefix="dailyrec-champion-") as workdir:
        champion, champion_model = find_champion(config, vocab, workdir)
    profile, guards = _guarded(config, meta, champion)
    scores, champion = _score_test_split(config, meta, vocab, candidate, champion, champion_model)
    if scores.champion is None:
        champion_model = None
    y, groups, prob = scores.labels, scores.users, scores.candidate
    confidence = config.rule.confidence
    side, champion = _on_dataset_features(config, scores, champion)
    served, served_auc, comparison = _as_served(
        config, meta, scores, candidate, champion_model, champion, side.comparison
    )
    verdict = decide(
        served_auc["auc"], champion, comparison, config.rule, guards, served["score_spread"]
    )

    metrics = Metrics(
        **{f"test_{k}": side.candidate[k] for k in ("auc", "gauc", "logloss", "ece")},
        model_name=config.model_name,
        candidate=side.candidate,
        test_auc_interval=clustered_auc(prob, y, groups, confidence),
        served=served,
        comparison_on_dataset_features=side.comparison,
        candidate_checkpoint=str(config.checkpoint),
        candidate_trained_on=candidate.info.get("dataset"),
        champion=champion,
        comparison=comparison,
        calibration_bins=side.bins,
        guards=guards,
        data_profile=profile.state_dict(),  # register logs it with the version
        dataset={
            "path": str(config.data),
            "fingerprint": meta.fingerprint,
            "window": dataclasses.asdict(meta.window) if meta.window else None,
            "test_rows": meta.split("test").rows,
        },
        plan_vs_actual=training_plan_vs_actual(config.checkpoint),
    )
    decision = dataclasses.replace(
        verdict,
        model_name=config.model_name,
        test_auc=side.candidate["auc"],
        served_auc=served_auc["auc"],
        champion_version=champion.get("version"),
        champion_status=champion["status"],
        comparison=comparison,
        candidate_checkpoint=str(config.checkpoint),
    )
    metrics = dataclasses.replace(metrics, seconds=time.perf_counter() - started)
    result = _record(config, meta, metrics, decision, side.curves, side.bins, side.predictions)
    log.info("evaluate: %s", result.line())
    return result


def _guarded(config: EvaluateConfig, meta: DatasetMeta, champion: dict) -> tuple[Any, dict]:
    """The candidate's training profile and the guards' result: the test day and every day the
    reference (the champion's profile, which leaves ``champion``; else this one) never saw."""
    window = WindowRows.read(config.data, meta)
    profile = training_profile(window)
    return profile, run_guards(window, champion.pop("profile", None) or profile, config.guards)


def _candidate_and_data(config: EvaluateConfig) -> tuple[DatasetMeta, Vocab, Any]:
    """The dataset's meta, its vocabulary and the candidate, refused where the candidate cannot
    score the data or the test split lacks a class."""
    meta = DatasetMeta.read(config.data)
    vocab = Vocab.from_meta(meta)
    candidate = load_scorer(config.checkpoint)
    problems = candidate.incompatibilities(vocab)
    if problems:
        raise EvaluateError(
            f"{config.checkpoint}: the candidate cannot score {config.data} ({'; '.join(problems)})"
        )
    try:
        meta.require_both_labels("test", "test AUC")
    except DatasetError as exc:
        raise EvaluateError(str(exc)) from None
    return meta, vocab, candidate


def _score_test_split(
    config: EvaluateConfig, meta, vocab, candidate, champion: dict, champion_model
) -> tuple[TestScores, dict]:
    """Both models' scores of the test split in one pass, and the champion's record: a champion
    that cannot score the rows (an error, or scores NaN) is marked unusable, never dropped
    silently."""
    log.info(
        "evaluate: scoring %d test rows with the candidate%s",
        meta.split("test").rows,
        f" and champion v{champion['version']}" if champion_model is not None else "",
    )
    labels, users, candidate_logits, champion_probs = [], [], [], []
    match = {c: [] for c in ("ts", "target_item", "target_cat")}
    keys = (*BATCH_KEYS, "label", "user_key", "ts")
    for start, batch in enumerate_rows(split_rows(config.data, "test", meta, config.batch, keys)):
        try:  # the ids serving checks: out of range they read a wrong row or crash in torch
            check_inputs(batch, vocab)
        except ValueError as exc:
            raise EvaluateError(
                f"{config.data}: test rows {start}..{start + len(batch['label']) - 1}: {exc}"
            ) from None
        labels.append(batch["label"].astype(np.float64))
        users.append(batch["user_key"])
        for c, values in match.items():
            values.append(np.asarray(batch[c], np.int64))
        candidate_logits.append(predict_logits(candidate.model, [batch]))
        if champion_model is not None:
            try:
                champion_probs.append(sigmoid(predict_logits(champion_model.model, [batch])))
            except Exception as exc:  # reported in the decision, never silently dropped
                champion = {
                    **champion,
                    "status": "unusable",
                    "reason": f"scoring failed: {type(exc).__name__}: {exc}"[:500],
                }
                champion_model = None
                log.warning(
                    "champion v%s cannot score today's data: %s",
                    champion["version"],
                    champion["reason"],
                )
    prob = sigmoid(np.concatenate(candidate_logits))
    if not np.isfinite(prob).all():  # a diverged model: its AUC would depend on row order
        raise EvaluateError(
            f"{config.checkpoint}: the candidate scores {int((~np.isfinite(prob)).sum())} of "
            f"{len(prob)} test rows NaN or infinite (training diverged); not evaluated"
        )
    champion_prob = np.concatenate(champion_probs) if champion_model is not None else None
    if champion_prob is not None and not np.isfinite(champion_prob).all():
        champion = {**champion, "status": "unusable", "reason": "scores NaN or infinite"}
        champion_prob = None
    scores = TestScores(
        labels=np.concatenate(labels),
        users=np.concatenate(users),
        match={c: np.concatenate(v) for c, v in match.items()},
        candidate=prob,
        champion=champion_prob,
    )
    return scores, champion


def _record(config, meta, metrics, decision, curves, bins, predictions) -> Evaluation:
    """Write the outputs and, with a tracking URI, record them as this evaluation's MLflow run
    (its id in the metrics)."""
    day = meta.window.end if meta.window else ""
    with tracked_run(config, day) as run:
        metrics = dataclasses.replace(metrics, mlflow_run_id=run.info.run_id if run else None)
        history = by_day(run, config.model_name, day, evaluation_numbers(metrics, decision))
        write_outputs(Path(config.out), metrics, decision, curves, bins, predictions, history)
        if run:
            log_evaluation(Path(config.out), metrics, decision)
    return Evaluation(metrics, decision)


def served_scores(
    config: EvaluateConfig,
    meta: DatasetMeta,
    rows: dict,
    candidate,
    champion_model,
    resolution: int | None = None,
) -> dict:
    """Probabilities on the test rows (split order) built as serving builds them
    (:mod:`components.evaluate.served`) from the dataset's state at the test day's start: both
    models with each user's earlier events of the day sent along (``candidate``, ``champion``),
    and the candidate from the snapshot alone (``snapshot_only``: callers that send no events).
    ``resolution``: the snapshot's time step in seconds (default: what register keeps)."""
    from components.evaluate.served import ServedError, ServedSplit
    from components.score.features import SNAPSHOT_SECONDS, Layout

    layout = Layout.of(candidate.vocab, check_key=False)
    try:
        split = ServedSplit.read(config.data, rows, layout, meta.split("test").day_list)
    except ServedError as exc:
        raise EvaluateError(f"{exc}; preprocess the window again") from None
    runs = {"candidate": (candidate.model, True), "snapshot_only": (candidate.model, False)}
    if champion_model is not None:
        runs["champion"] = (champion_model.model, True)
    out = {name: np.full(len(rows["label"]), np.nan) for name in runs}
    for day in split.days():  # each from the state at its start, as the daily pipeline serves
        snapshot = day.snapshot(layout, SNAPSHOT_SECONDS if resolution is None else resolution)
        for name, (model, day_events) in runs.items():
            batches = day.batches(snapshot, layout, config.batch, day_events)
            with np.errstate(invalid="ignore"):  # request rows' own columns, replaced by totals
                logits = np.concatenate([predict_logits(model, [b]) for b in batches])
            out[name][day.order] = sigmoid(logits)
    for name, prob in out.items():
        if not np.isfinite(prob).all():
            raise EvaluateError(f"the {name} scores served rows NaN or infinite; not evaluated")
    return out


def enumerate_rows(batches):
    """(first row, batch) of consecutive batches."""
    start = 0
    for batch in batches:
        yield start, batch
        start += len(batch["label"])


@contextlib.contextmanager
def tracked_run(config: EvaluateConfig, day: str = ""):
    """An MLflow run of this evaluation (None without a tracking URI), named by the last ``day``
    of the window it judges (days of runs tell apart); ends FAILED if the block raises, KILLED if
    it is stopped."""
    if not config.tracking_uri:
        yield None
        return
    from components.common.stop import started_run
    from components.common.tracking import connect, ensure_experiment

    client = connect(config.tracking_uri)
    experiment_id = ensure_experiment(client, EXPERIMENT, config.tracking_uri)
    with started_run(
        experiment_id=experiment_id,
        run_name=f"evaluate-{day or Path(config.checkpoint).parent.name}",
        tags={"model_name": config.model_name, DAY_TAG: day},
    ) as run:
        yield run


DAY_TAG = "dailyrec.day"
"""The test day an evaluation run judged (the last day of its window)."""
HISTORY_DAYS = 60
"""Days the by-day plot shows, the newest last."""


def by_day(run: Any, model_name: str, day: str, today: dict[str, float]) -> list[dict]:
    """The by-day plot's rows, oldest first: the latest finished evaluation of each earlier day in
    ``run``'s experiment (none without a run) and ``today`` (:func:`evaluation_numbers`) for
    ``day``; days that are not dates (an evaluation outside the daily pipeline) are left out."""
    import datetime as dt

    numbers: dict[str, dict[str, float]] = {}
    if run is not None:
        import mlflow

        from components.common.registry_read import filter_literal

        found = mlflow.MlflowClient().search_runs(
            [run.info.experiment_id],
            filter_string="attributes.status = 'FINISHED' and tags.model_name = "
            + filter_literal(model_name),
            order_by=["attributes.start_time DESC"],
            max_results=4 * HISTORY_DAYS,
        )
        for earlier in found:  # newest first: the first of a day is its latest
            day_of = earlier.data.tags.get(DAY_TAG) or earlier.info.run_name.removeprefix(
                "evaluate-"
            )
            numbers.setdefault(day_of, earlier.data.metrics)
    numbers[day] = today
    rows = []
    for when, values in numbers.items():
        try:
            dt.date.fromisoformat(when)
        except ValueError:
            continue
        rows.append(
            {
                "day": when,
                "test_auc": values.get("test_auc"),
                "champion_auc": values.get("champion_auc"),
                "blessed": bool(values.get("blessed")),
                "time_ratio": values.get("train_time_ratio"),
                "memory_ratio": values.get("train_memory_ratio"),
            }
        )
    return sorted(rows, key=lambda r: r["day"])[-HISTORY_DAYS:]


def evaluation_numbers(metrics: Metrics, decision: Decision) -> dict[str, float]:
    """The run's metrics: the candidate's and the champion's on the test split, the verdict, and
    the training's measured time and peak memory over its plan's (finite values only)."""
    numbers = {k: float(v) for k, v in metrics.numbers().items()}
    champion = metrics.champion.get("metrics") or {}
    numbers.update(
        {
            f"champion_{k}": float(champion[k])
            for k in ("auc", "gauc", "logloss", "ece")
            if k in champion
        }
    )
    if metrics.comparison:
        numbers["auc_delta_vs_champion"] = float(metrics.comparison["delta"])
    numbers["blessed"] = float(decision.blessed)
    pva = metrics.plan_vs_actual or {}
    for key, name in (("seconds", "train_time_ratio"), ("peak_memory_bytes", "train_memory_ratio")):
        if (pva.get(key) or {}).get("ratio") is not None:
            numbers[name] = float(pva[key]["ratio"])
    return {k: v for k, v in numbers.items() if np.isfinite(v)}


def log_evaluation(out: Path, metrics: Metrics, decision: Decision) -> None:
    """The evaluation's metrics, verdict, plots and report in the active MLflow run."""
    import mlflow

    mlflow.log_metrics(evaluation_numbers(metrics, decision))
    mlflow.set_tags(
        {
            "blessed": str(decision.blessed).lower(),
            "champion_version": str(decision.champion_version or ""),
            "dataset_fingerprint": str(metrics.dataset.get("fingerprint") or ""),
        }
    )
    for name in (METRICS, DECISION, ROC, *report.PLOTS.values(), report.REPORT_MD):
        mlflow.log_artifact(str(out / name), artifact_path="evaluation")
    # at the top: the page a person opens first (MLflow shows HTML; Markdown as plain text)
    mlflow.log_artifact(str(out / report.REPORT_HTML))
    dataset = metrics.dataset
    if dataset.get("path"):
        from components.common.tracking import dataset_input

        mlflow.log_input(
            dataset_input(dataset["path"], dataset.get("fingerprint")), context="evaluation"
        )


def training_plan_vs_actual(checkpoint: str) -> dict | None:
    """The training run's plan vs reality, from the train_summary.json next to the checkpoint
    (None when there is none, e.g. a checkpoint copied elsewhere)."""
    from components.common.train_summary import TrainSummary

    summary = TrainSummary.beside(checkpoint)
    return (
        None if summary is None or summary.plan_vs_actual is None else dict(summary.plan_vs_actual)
    )


def find_champion(config: EvaluateConfig, vocab: Vocab, workdir: str | Path) -> tuple[dict, Any]:
    """``({"status", "version", "reason"}, Scorer or None)`` of ``NAME@champion``.

    An unreachable registry raises (TrackingError): deciding without knowing
    the champion would be a silent guess. The champion's files are checked
    against the digest recorded at registration and only its weights are read
    (``weights_only``), into ``workdir``: no code from the artifact store runs
    here. A champion that exists but fails the check, cannot be loaded, or was
    built for other hash buckets is returned as ``unusable``.
    """
    if not config.tracking_uri:
        return {"status": "none", "version": None, "reason": "no tracking URI given"}, None
    from components.common.integrity import WEIGHTS, verified_download
    from components.common.registry import CHAMPION, alias_version
    from components.common.registry_read import NoRegistry, connect_readonly

    try:
        client = connect_readonly(config.tracking_uri)
    except NoRegistry:
        client = None
    found = alias_version(client, config.model_name, CHAMPION) if client else None
    if found is None:
        return {
            "status": "none",
            "version": None,
            "reason": f"{config.model_name}@champion not set",
        }, None
    info = {
        "status": "scored",
        "version": int(found.version),
        "reason": None,
        "run_id": found.run_id,
        "tags": dict(found.tags),
    }
    try:
        # by version, not alias: the alias could move while we score
        local = verified_download(client, config.model_name, found.version, workdir)
        scorer = load_scorer(local / WEIGHTS)
        problems = scorer.incompatibilities(vocab)
    except (
        Exception
    ) as exc:  # IntegrityError, CheckpointError, download errors: reported, never skipped
        return {
            **info,
            "status": "unusable",
            "reason": f"cannot load: {type(exc).__name__}: {exc}"[:500],
        }, None
    if problems:
        return {
            **info,
            "status": "unusable",
            "reason": "built for other inputs: " + "; ".join(problems),
        }, None
    return {**info, "profile": champion_profile(local)}, scorer


def champion_profile(local: Path) -> WindowProfile | None:
    """The training-window profile a verified model folder carries; None when it has none (a
    version registered before profiles) or one this code cannot read (the guards then compare
    with the candidate's own window, and the log says why)."""
    import json

    from components.common.integrity import PROFILE

    path = local / PROFILE
    if not path.is_file():
        return None
    try:
        return WindowProfile.from_state(json.loads(path.read_text()), str(path))
    except (ProfileError, ValueError) as exc:
        log.warning(
            "champion's data profile unreadable, guards use the candidate's window: %s", exc
        )
        return None


def write_outputs(
    out: Path,
    metrics: Metrics,
    decision: Decision,
    curves: dict,
    bins: dict,
    predictions: dict[str, np.ndarray] | None = None,
    history: list[dict] | None = None,
) -> None:
    """``curves``, ``bins``, ``predictions``: by label (candidate, champion vN); ``history``: the
    by-day plot's rows (:func:`by_day`)."""
    champion = metrics.champion
    aucs = {"candidate": metrics.test_auc}
    if champion.get("metrics"):
        aucs[f"champion v{champion['version']}"] = champion["metrics"]["auc"]
    with atomic_dir(out) as tmp:
        metrics.write(tmp)
        decision.write(tmp)
        atomic_write_json(tmp / ROC, curves)
        report.plot_roc(curves, tmp / report.ROC_PNG, aucs)
        report.plot_calibration(bins, tmp / report.CALIBRATION_PNG, predictions)
        report.plot_history(history or [], tmp / report.HISTORY_PNG)
        atomic_write_bytes(
            tmp / report.REPORT_MD, report.markdown(metrics, decision, report.PLOTS).encode()
        )
        inline = {t: report.data_uri((tmp / name).read_bytes()) for t, name in report.PLOTS.items()}
        page = report.html(report.markdown(metrics, decision, inline), metrics.model_name)
        atomic_write_bytes(tmp / report.REPORT_HTML, page.encode())
