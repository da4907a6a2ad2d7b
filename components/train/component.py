"""KFP component of the train stage: launches the trainer (torchrun here; a TrainJob on the cluster)."""

from typing import NamedTuple

from kfp import dsl

from pipelines.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def train_op(
    data_dir: str, plan_path: str, run_dir: str, warm_start: bool, model_name: str, tracking_uri: str,
    launcher: str, max_restarts: int, cluster_target: str, model: dsl.Output[dsl.Model],
) -> NamedTuple("Trained", [("checkpoint", str), ("best_val_auc", float), ("warm_started", bool)]):
    """Train per the plan (launcher local: torchrun here; trainjob: a Kubeflow Trainer TrainJob).

    Warm-starts from the champion when asked and the shapes match.
    """
    import time
    from collections import namedtuple
    from pathlib import Path

    from components.common.runs import record_stage
    from components.train.launch import LaunchSpec, launch
    from components.train.trainer import summary_line

    started = time.perf_counter()
    init_from = None
    if warm_start and tracking_uri:
        from components.common.tracking import connect
        from components.register.registry import champion_checkpoint

        found = champion_checkpoint(connect(tracking_uri), model_name, str(Path(run_dir) / "champion"))
        if found:
            print(f"warm start: from {model_name} v{found[0]} (applied if the shapes match)")
            init_from = found[1]
    backend = None  # torchrun in this task's pod
    if launcher == "trainjob":
        from kube.client import TrainJobBackend

        backend = TrainJobBackend.from_cluster_target(cluster_target)
    out = Path(run_dir) / "train"
    summary = launch(LaunchSpec.of(data=data_dir, out=str(out), plan=plan_path, init_from=init_from,
                                   tracking_uri=tracking_uri or None, experiment=f"{model_name}-train",
                                   max_restarts=max_restarts), backend)
    print(summary_line(summary))
    checkpoint = str(out / "best.pt")
    model.metadata.update({"checkpoint": checkpoint, "best_val_auc": summary["best_val_auc"],
                           "epochs_run": summary["epochs_run"]})
    with open(model.path, "w") as fh:  # a pointer: the checkpoint stays on shared storage
        fh.write(checkpoint + "\n")
    applied = bool(summary.get("warm_start") and summary["warm_start"]["applied"])
    record_stage(run_dir, "train", time.perf_counter() - started, warm_start=summary.get("warm_start"))
    return namedtuple("Trained", ["checkpoint", "best_val_auc", "warm_started"])(
        checkpoint, float(summary["best_val_auc"]), applied)
