"""KFP component of the estimate stage."""

from typing import NamedTuple

from kfp import dsl

from pipelines.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def estimate_op(
    data_dir: str, run_dir: str, model_config: str, hardware_profile: str, global_batch: int,
    deadline_hours: float, max_epochs: int, preprocess_seconds: float, plan: dsl.Output[dsl.Artifact],
) -> NamedTuple("Estimated", [("plan_path", str), ("nproc", int), ("nnodes", int)]):
    """A training plan for this model, dataset and hardware (deadline_hours 0 = none)."""
    import dataclasses
    import shutil
    import time
    from collections import namedtuple
    from pathlib import Path

    from components.common.runs import record_stage
    from components.common.storage import disk_full_as
    from components.estimate.planner import EstimateConfig, table, write

    started = time.perf_counter()
    record_stage(run_dir, "preprocess", preprocess_seconds, data_dir=data_dir)
    with disk_full_as("estimate", run_dir):
        path, doc = write(EstimateConfig(data=data_dir, model=model_config, hardware=hardware_profile,
                                         global_batch=global_batch, deadline_hours=deadline_hours or None,
                                         max_epochs=max_epochs), Path(run_dir) / "plan.json")
    print(table(doc))
    shutil.copyfile(path, plan.path)
    train = dataclasses.asdict(doc["train"])
    plan.metadata.update({k: train[k] for k in ("model", "nproc_per_node", "nnodes", "micro_batch",
                                                "grad_accum", "precision", "lr", "max_epochs")})
    record_stage(run_dir, "estimate", time.perf_counter() - started)
    return namedtuple("Estimated", ["plan_path", "nproc", "nnodes"])(
        str(path), train["nproc_per_node"], train["nnodes"])
