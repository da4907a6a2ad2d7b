"""KFP component of the hyperparameter search: trials run one at a time inside the task."""

from typing import NamedTuple

from kfp import dsl

from pipelines.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def tune_op(
    dataset: dsl.Input[dsl.Dataset],
    run_dir: str,
    storage_root: str,
    base_model: str,
    hardware_profile: str,
    global_batch: int,
    max_epochs: int,
    trials: int,
    pruner: str,
    min_epochs: int,
    reduction_factor: int,
    sampler: str,
    seed: int,
    search_space: str,
    enqueue: str,
    timeout_hours: float,
    tracking_uri: str,
    tuned: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
) -> NamedTuple("Tuned", [("tuned_path", str), ("best_val_auc", float)]):
    """Optuna search with ASHA/Hyperband pruning over the dataset; writes run_dir/tune/tuned.json
    and copies it to storage_root/tuned/latest.json.

    Args:
        dataset: the preprocess output (a pointer to the dataset folder).
        run_dir: this run's folder (the study goes to run_dir/tune).
        storage_root: shared storage (tuned/latest.json goes there).
        base_model: model config the trials vary (debug | local | prod | a .json file).
        hardware_profile: profile the trials are planned for; architectures must fit its memory.
        global_batch: samples per optimizer step of every trial.
        max_epochs: epochs a trial trains at most (the pruner's maximum resource).
        trials: complete + pruned trials to run.
        pruner: asha | hyperband | none.
        min_epochs: epochs before a trial can be pruned.
        reduction_factor: about 1 in this many trials goes on to the next rung.
        sampler: tpe | random.
        seed: sampler seed.
        search_space: JSON of ranges and choices (components/tune/space.py); empty = defaults.
        enqueue: JSON list of parameter sets to try first; empty = none.
        timeout_hours: start no trial after this long; 0 = no limit.
        tracking_uri: MLflow tracking URI (one run per trial); empty = none.

    Returns:
        tuned: tuned.json (the best parameters), with them as metadata.
        metrics: best validation AUC and trial counts.
        tuned_path: path of tuned.json on shared storage.
        best_val_auc: the best trial's validation AUC.
    """
    import json
    import shutil
    import time
    from collections import namedtuple
    from pathlib import Path

    import torch

    from components.common.dataset import read_pointer
    from components.common.runs import record_stage
    from components.tune.space import SearchSpace
    from components.tune.study import TuneConfig, summary_text, tune

    torch.set_num_threads(1)  # trials train in this process (the plan's cpu_threads says the same)
    started = time.perf_counter()
    config = TuneConfig(
        data=read_pointer(dataset.path),
        out=str(Path(run_dir) / "tune"),
        base_model=base_model,
        hardware=hardware_profile,
        global_batch=global_batch,
        max_epochs=max_epochs,
        trials=trials,
        pruner=pruner,
        min_epochs=min_epochs,
        reduction_factor=reduction_factor,
        sampler=sampler,
        seed=seed,
        space=SearchSpace.from_dict(json.loads(search_space) if search_space else None),
        enqueue=tuple(json.loads(enqueue) if enqueue else ()),
        timeout_hours=timeout_hours or None,
        tracking_uri=tracking_uri or None,
    )
    summary = tune(config)
    print(summary_text(summary))
    latest = Path(storage_root) / "tuned" / "latest.json"
    latest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(summary["tuned_file"], latest)
    print(f"also at {latest}")
    shutil.copyfile(summary["tuned_file"], tuned.path)
    tuned.metadata.update(
        {"path": summary["tuned_file"], "latest": str(latest), **summary["best_params"]}
    )
    for key in (
        "best_val_auc",
        "trials",
        "complete",
        "pruned",
        "failed",
        "epochs_spent",
        "epochs_if_unpruned",
    ):
        metrics.log_metric(key, summary[key])
    record_stage(run_dir, "tune", time.perf_counter() - started, tuned=summary["tuned_file"])
    return namedtuple("Tuned", ["tuned_path", "best_val_auc"])(
        summary["tuned_file"], float(summary["best_val_auc"])
    )
