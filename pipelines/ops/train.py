"""KFP component of the train stage: launches the trainer (torchrun here; a TrainJob on the cluster)."""

from typing import NamedTuple

from kfp import dsl

from components.common.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def train_op(
    dataset: dsl.Input[dsl.Dataset],
    plan: dsl.Input[dsl.Artifact],
    run_dir: str,
    warm_start: bool,
    model_name: str,
    tracking_uri: str,
    launcher: str,
    max_restarts: int,
    cluster_target: str,
    model: dsl.Output[dsl.Model],
) -> NamedTuple("Trained", [("best_val_auc", float), ("warm_started", bool)]):
    """Train per the plan (launcher local: torchrun here; trainjob: a Kubeflow Trainer TrainJob).

    A retried task resumes from the last checkpoint (and follows its own TrainJob if it still runs).

    Args:
        dataset: the preprocess output (a pointer to the dataset folder on shared storage).
        plan: the estimate's plan; put on shared storage as run_dir/plan.json for the trainer processes.
        run_dir: this run's folder (checkpoints go to run_dir/train).
        warm_start: initialize from the champion's weights when their shapes match.
        model_name: registered model name (the champion to warm-start from; the MLflow experiment).
        tracking_uri: MLflow tracking URI; empty = no tracking.
        launcher: local (torchrun in this task) or trainjob (Kubeflow Trainer).
        max_restarts: torchrun restarts of failed workers (they resume from the last checkpoint).
        cluster_target: JSON of the cluster environment (TrainJob placement); empty locally.

    Returns:
        model: pointer to the best checkpoint, with its validation AUC and epochs as metadata.
        best_val_auc: best validation AUC.
        warm_started: whether the champion's weights were applied.
    """
    import time
    from collections import namedtuple
    from pathlib import Path

    from components.common.attempts import attempt, final_record
    from components.common.dataset import read_pointer
    from components.common.proctree import stop_tree_on_signals
    from components.common.runs import RunFolder, record_stage
    from components.common.storage import atomic_write_bytes
    from components.train.launch import LaunchSpec, launch
    from pipelines import training
    from pipelines.outputs import publish_model

    started = time.perf_counter()
    data_dir = read_pointer(dataset.path)
    # the artifact is the plan; the trainer processes (other pods on a cluster) read it from shared storage
    plan_path = atomic_write_bytes(RunFolder(Path(run_dir)).plan, Path(plan.path).read_bytes())
    champion, init_from = training.champion_start(warm_start, tracking_uri, model_name, run_dir)
    backend = training.launch_backend(launcher, cluster_target)  # None: torchrun in this task's pod
    out = RunFolder(Path(run_dir)).train
    # a TrainJob that failed after its JobSet restarts (or torchrun after its own) is final: a KFP
    # retry of this task fails at once instead of launching the GPUs again
    with (
        stop_tree_on_signals(),  # a pod's SIGTERM: the ranks end their MLflow run KILLED
        attempt(final_record(run_dir, "train"), "train"),
        training.final_when_spent(launcher),
    ):
        summary = launch(
            LaunchSpec.of(
                data=data_dir,
                out=str(out),
                plan=str(plan_path),
                init_from=init_from,
                tracking_uri=tracking_uri or None,
                experiment=f"{model_name}-train",
                max_restarts=max_restarts,
            ),
            backend,
        )
    print(summary.line())
    publish_model(model, str(out / "best.pt"), summary)
    warm = training.warm_start_outcome(warm_start, model_name, champion, summary.warm_start)
    record_stage(run_dir, "train", time.perf_counter() - started, warm_start=warm)
    return namedtuple("Trained", ["best_val_auc", "warm_started"])(
        float(summary.best_val_auc), warm["applied"]
    )
