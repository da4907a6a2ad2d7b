"""KFP component of the evaluate stage: metrics, ROC and a report the Kubeflow UI shows."""

from kfp import dsl

from pipelines.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def evaluate_op(
    data_dir: str, checkpoint: str, run_dir: str, model_name: str, tracking_uri: str, min_auc: float,
    tolerance: float, metrics: dsl.Output[dsl.Metrics], roc: dsl.Output[dsl.ClassificationMetrics],
    report: dsl.Output[dsl.Markdown],
) -> bool:
    """Test metrics of the candidate and the champion; returns blessed (reasons in run_dir/evaluate).

    A single return value on purpose: kfp.local (2.17) cannot resolve a dsl.If
    condition on one field of a NamedTuple output, but resolves ``Output``.
    """
    import json
    import math
    import time
    from pathlib import Path

    from components.common.runs import record_stage
    from components.common.storage import disk_full_as
    from components.evaluate import report as reporting
    from components.evaluate.decision import GateRule
    from components.evaluate.stage import EvaluateConfig, evaluate

    started = time.perf_counter()
    out = Path(run_dir) / "evaluate"
    with disk_full_as("evaluate", out):
        result = evaluate(EvaluateConfig(data=data_dir, checkpoint=checkpoint, out=str(out),
                                         model_name=model_name, tracking_uri=tracking_uri or None,
                                         rule=GateRule(min_auc=min_auc, tolerance=tolerance)))
    m, decision = result["metrics"], result["decision"]
    for key in ("test_auc", "test_gauc", "test_logloss", "test_ece"):
        if not math.isnan(m[key]):
            metrics.log_metric(key, round(m[key], 6))
    if m["comparison"] and not math.isnan(m["comparison"]["delta"]):
        metrics.log_metric("auc_delta_vs_champion", round(m["comparison"]["delta"], 6))
    metrics.log_metric("blessed", int(decision["blessed"]))
    points = json.loads((out / "roc.json").read_text())["candidate"]
    # the UI wants finite thresholds: the (0, 0) point's +inf becomes 1 (probabilities)
    roc.log_roc_curve([p["fpr"] for p in points], [p["tpr"] for p in points],
                      [min(p["threshold"], 1.0) for p in points])
    images = {title: reporting.data_uri((out / name).read_bytes())
              for title, name in (("ROC", reporting.ROC_PNG), ("Calibration", reporting.CALIBRATION_PNG))}
    Path(report.path).write_text(reporting.markdown(m, decision, images))
    record_stage(run_dir, "evaluate", time.perf_counter() - started, blessed=decision["blessed"])
    return bool(decision["blessed"])
