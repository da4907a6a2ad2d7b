"""What the tasks publish to Kubeflow: the output artifacts' files and metadata, and the metrics
the UI shows. The stages write their own results to shared storage; this only points at them."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path


def publish_model(model, checkpoint: str, summary) -> None:
    """The model artifact: a pointer to ``checkpoint`` (which stays on shared storage) with the
    training ``summary``'s best validation AUC and epochs as metadata."""
    model.metadata.update(
        {
            "checkpoint": checkpoint,
            "best_val_auc": summary.best_val_auc,
            "epochs_run": summary.epochs_run,
        }
    )
    with open(model.path, "w") as fh:
        fh.write(checkpoint + "\n")


def publish_evaluation(result, out: Path, metrics, roc, report) -> None:
    """The evaluation's numbers, the candidate's ROC curve and the Markdown report (with the
    plots inlined) from the evaluate stage's ``result`` and its folder ``out``."""
    from components.evaluate import report as reporting

    m, decision = result.metrics, result.decision
    for key, value in m.numbers().items():
        if not math.isnan(value):
            metrics.log_metric(key, round(value, 6))
    if m.comparison and not math.isnan(m.comparison["delta"]):
        metrics.log_metric("auc_delta_vs_champion", round(m.comparison["delta"], 6))
    metrics.log_metric("blessed", int(decision.blessed))
    points = json.loads((out / "roc.json").read_text())["candidate"]
    # the UI wants finite thresholds: the (0, 0) point's +inf becomes 1 (probabilities)
    roc.log_roc_curve(
        [p["fpr"] for p in points],
        [p["tpr"] for p in points],
        [min(p["threshold"], 1.0) for p in points],
    )
    images = {
        title: reporting.data_uri((out / name).read_bytes())
        for title, name in reporting.PLOTS.items()
    }
    Path(report.path).write_text(reporting.markdown(m, decision, images))


SEARCH_METRICS = (
    "best_val_auc",
    "trials",
    "complete",
    "pruned",
    "failed",
    "epochs_spent",
    "epochs_if_unpruned",
)
"""The search summary's numbers shown as the tune task's metrics."""


def publish_search(summary: dict, storage_root: str, tuned, metrics) -> None:
    """The search's tuned.json as the ``tuned`` artifact and at storage_root/tuned/latest.json
    (what a daily run trains with, given as its ``model_config``), and its numbers as metrics."""
    latest = Path(storage_root) / "tuned" / "latest.json"
    latest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(summary["tuned_file"], latest)
    print(f"also at {latest}")
    shutil.copyfile(summary["tuned_file"], tuned.path)
    tuned.metadata.update(
        {"path": summary["tuned_file"], "latest": str(latest), **summary["best_params"]}
    )
    for key in SEARCH_METRICS:
        metrics.log_metric(key, summary[key])
