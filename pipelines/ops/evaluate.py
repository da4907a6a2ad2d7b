"""KFP component of the evaluate stage: metrics, ROC and a report the Kubeflow UI shows."""

from kfp import dsl

from components.common.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def evaluate_op(
    dataset: dsl.Input[dsl.Dataset],
    model: dsl.Input[dsl.Model],
    run_dir: str,
    model_name: str,
    tracking_uri: str,
    min_auc: float,
    tolerance: float,
    guards_report_only: bool,
    metrics: dsl.Output[dsl.Metrics],
    roc: dsl.Output[dsl.ClassificationMetrics],
    report: dsl.Output[dsl.Markdown],
) -> bool:
    """Test metrics of the candidate and the champion; returns blessed (reasons in run_dir/evaluate).

    The register task reads the decision itself (no condition in the pipeline): ``Output`` is
    there for the Kubeflow UI and for callers of this component.

    Args:
        dataset: the preprocess output (a pointer to the dataset folder); its test split is scored.
        model: the trained candidate (a pointer to its best checkpoint).
        run_dir: this run's folder (metrics.json, decision.json, plots and report go to run_dir/evaluate).
        model_name: registered model name whose champion the candidate is compared with.
        tracking_uri: MLflow tracking and registry URI; empty = no champion comparison.
        min_auc: absolute floor on the candidate's test AUC.
        tolerance: AUC the candidate may lose against the champion at the 95% CI's upper bound.
        guards_report_only: report the data guards without blocking on them.

    Returns:
        metrics: test AUC, GAUC, log loss, ECE, the delta against the champion, blessed.
        roc: the candidate's ROC curve.
        report: the evaluation report (Markdown, with the ROC and calibration plots).
        Output: blessed: whether the candidate passed the gate and may be registered.
    """
    import time
    from pathlib import Path

    from components.common.attempts import attempt, final_record
    from components.common.dataset import read_pointer
    from components.common.proctree import stop_tree_on_signals
    from components.common.runs import RunFolder, record_stage
    from components.common.storage import disk_full_as
    from components.evaluate.decision import GateRule
    from components.evaluate.guards import GuardRule
    from components.evaluate.stage import EvaluateConfig, evaluate
    from pipelines.outputs import publish_evaluation

    started = time.perf_counter()
    out = RunFolder(Path(run_dir)).evaluate
    with (
        stop_tree_on_signals(),  # a pod's SIGTERM ends the stage's MLflow run KILLED
        attempt(final_record(run_dir, "evaluate"), "evaluate"),
        disk_full_as("evaluate", out),
    ):
        result = evaluate(
            EvaluateConfig(
                data=read_pointer(dataset.path),
                checkpoint=Path(model.path).read_text().strip(),
                out=str(out),
                model_name=model_name,
                tracking_uri=tracking_uri or None,
                rule=GateRule(min_auc=min_auc, tolerance=tolerance),
                guards=GuardRule(report_only=guards_report_only),
            )
        )
    publish_evaluation(result, out, metrics, roc, report)
    blessed = result.decision.blessed
    record_stage(run_dir, "evaluate", time.perf_counter() - started, blessed=blessed)
    return blessed
