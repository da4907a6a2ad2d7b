"""KFP component of the hyperparameter search: trials run one at a time inside the task."""

from typing import NamedTuple

from kfp import dsl

from components.common.images import RUNTIME_IMAGE


def with_settings_docs(func):
    """Describe the search settings of a KFP function under its ``Args:`` from TuneConfig's field
    docs (KFP reads parameter descriptions from the docstring), so each is described once."""
    from components.tune.config import pipeline_docs

    lines = [f"        {param}: {doc}" for param, doc in pipeline_docs().items()]
    func.__doc__ = func.__doc__.replace("    Args:\n", "    Args:\n" + "\n".join(lines) + "\n", 1)
    return func


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
@with_settings_docs
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

    Returns:
        tuned: tuned.json (the best parameters), with them as metadata.
        metrics: best validation AUC and trial counts.
        tuned_path: path of tuned.json on shared storage.
        best_val_auc: the best trial's validation AUC.
    """
    given = dict(locals())  # the parameters, before anything else is a local
    import time
    from collections import namedtuple
    from pathlib import Path

    import torch

    from components.common.dataset import read_pointer
    from components.common.runs import record_stage
    from components.tune.config import PIPELINE_PARAMETERS, config_from_parameters
    from components.tune.study import summary_text, tune
    from pipelines.outputs import publish_search

    torch.set_num_threads(1)  # trials train in this process (the plan's cpu_threads says the same)
    started = time.perf_counter()
    config = config_from_parameters(
        read_pointer(dataset.path),
        str(Path(run_dir) / "tune"),
        {k: v for k, v in given.items() if k in PIPELINE_PARAMETERS},
    )
    summary = tune(config)
    print(summary_text(summary))
    publish_search(summary, storage_root, tuned, metrics)
    record_stage(run_dir, "tune", time.perf_counter() - started, tuned=summary["tuned_file"])
    return namedtuple("Tuned", ["tuned_path", "best_val_auc"])(
        summary["tuned_file"], float(summary["best_val_auc"])
    )
