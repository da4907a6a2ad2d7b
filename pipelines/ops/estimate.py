"""KFP component of the estimate stage."""

from typing import NamedTuple

from kfp import dsl

from components.common.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def estimate_op(
    dataset: dsl.Input[dsl.Dataset],
    run_dir: str,
    model_config: str,
    hardware_profile: str,
    global_batch: int,
    deadline_hours: float,
    max_epochs: int,
    negative_keep: float,
    negatives_per_positive: float,
    preprocess_seconds: float,
    plan: dsl.Output[dsl.Artifact],
) -> NamedTuple(
    "Estimated",
    [("nproc", int), ("nnodes", int), ("evaluate_cpu", str), ("evaluate_memory", str)],
):
    """A training plan for this model, dataset and hardware.

    Args:
        dataset: the preprocess output (a pointer to the dataset folder); its meta.json sizes the plan.
        run_dir: this run's folder (plan.json and the stage timings go there).
        model_config: named model config (debug | local | prod) or a tuned .json file.
        hardware_profile: hardware profile name or a JSON file.
        global_batch: samples per optimizer step across all processes.
        deadline_hours: training wall-clock budget the plan must meet; 0 = none.
        max_epochs: epochs at most.
        negative_keep: share of the training negatives trained on (every positive kept).
        negatives_per_positive: at most this many training negatives per positive; 0 = no limit.
        preprocess_seconds: wall-clock seconds of the preprocess task (recorded with the stage timings).

    Returns:
        plan: the plan (plan.json), with its main choices as metadata.
        nproc: training processes per node.
        nnodes: training nodes.
        evaluate_cpu: CPUs of the evaluate task's pod, sized from the test split.
        evaluate_memory: memory of the evaluate task's pod (a quantity), sized from the test split.
    """
    import shutil
    import time
    from collections import namedtuple
    from pathlib import Path

    from components.common.attempts import attempt, final_record
    from components.common.dataset import read_pointer
    from components.common.runs import RunFolder, record_stage
    from components.common.storage import disk_full_as
    from components.estimate.planner import EstimateConfig, estimate_and_write
    from components.estimate.table import plan_table

    started = time.perf_counter()
    data_dir = read_pointer(dataset.path)
    record_stage(run_dir, "preprocess", preprocess_seconds, data_dir=data_dir)
    with (
        attempt(final_record(run_dir, "estimate"), "estimate"),
        disk_full_as("estimate", run_dir),
    ):
        path, doc = estimate_and_write(
            EstimateConfig(
                data=data_dir,
                model=model_config,
                hardware=hardware_profile,
                global_batch=global_batch,
                deadline_hours=deadline_hours or None,
                max_epochs=max_epochs,
                negative_keep=negative_keep,
                negatives_per_positive=negatives_per_positive,
            ),
            RunFolder(Path(run_dir)).plan,
        )
    print(plan_table(doc))
    shutil.copyfile(path, plan.path)
    plan.metadata.update(doc["train"].brief())
    from components.common.dataset_meta import DatasetMeta
    from components.evaluate.resources import evaluate_resources

    meta = DatasetMeta.read(data_dir, splits=())
    cpu, memory = evaluate_resources(meta.split("test").rows, meta.row_bytes)
    record_stage(run_dir, "estimate", time.perf_counter() - started)
    return namedtuple("Estimated", ["nproc", "nnodes", "evaluate_cpu", "evaluate_memory"])(
        doc["train"].nproc_per_node, doc["train"].nnodes, cpu, memory
    )
