"""KFP component of the register stage: runs after every evaluation, registers only a blessed model."""

from typing import NamedTuple

from kfp import dsl

from components.common.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def register_op(
    model: dsl.Input[dsl.Model],
    evaluation: dsl.Input[dsl.Metrics],
    run_dir: str,
    model_name: str,
    tracking_uri: str,
    run_id: str,
    registration: dsl.Output[dsl.Artifact],
) -> NamedTuple("Registered", [("version", int), ("champion_version", int)]):
    """Register a blessed candidate in MLflow and move the champion/previous aliases; a candidate
    that is not blessed is left unregistered (the decision is read from run_dir/evaluate).

    Args:
        model: the evaluated candidate (a pointer to its best checkpoint).
        evaluation: the evaluate task's metrics of this candidate (the decision is in run_dir/evaluate).
        run_dir: this run's folder (evaluate/ is read, registration.json is written).
        model_name: registered model name.
        tracking_uri: MLflow tracking and registry URI.
        run_id: this pipeline run's id (tags the version, so a re-run finds it instead of registering twice).

    Returns:
        registration: registration.json, with the model name, version and champion version as metadata.
        version: the registered version (0 = none).
        champion_version: the champion's version after this run.
    """
    import json
    import time
    from collections import namedtuple
    from pathlib import Path

    from components.common.attempts import attempt, final_record
    from components.common.evaluation import DECISION, METRICS
    from components.common.lock import TASK_WAIT_S, root_of, storage_lock
    from components.common.proctree import stop_tree_on_signals
    from components.common.runs import RunFolder, record_stage
    from components.common.storage import disk_full_as
    from components.register.config import RegisterConfig
    from components.register.stage import register

    started = time.perf_counter()
    evaluated = RunFolder(Path(run_dir)).evaluate
    config = RegisterConfig(
        checkpoint=Path(model.path).read_text().strip(),
        metrics=str(evaluated / METRICS),
        decision=str(evaluated / DECISION),
        model_name=model_name,
        tracking_uri=tracking_uri,
        pipeline_run_id=run_id,
        out=run_dir,
    )
    # alias moves of runs on one storage root are serialized: register's compare-and-set needs it
    with (
        stop_tree_on_signals(),  # a pod's SIGTERM ends the stage's MLflow run KILLED
        attempt(final_record(run_dir, "register"), "register"),
        storage_lock(root_of(run_dir), run_id, stage="register", wait_s=TASK_WAIT_S),
        disk_full_as("register", run_dir),
    ):
        result = register(config)
    print(result.line())
    Path(registration.path).write_text(json.dumps(result.to_document()))
    registration.metadata.update(
        {
            "model_name": model_name,
            "version": int(result.version or 0),
            "champion_version": int(result.champion_version or 0),
            "evaluation": evaluation.uri,
        }
    )
    record_stage(run_dir, "register", time.perf_counter() - started, version=result.version)
    return namedtuple("Registered", ["version", "champion_version"])(
        int(result.version or 0), int(result.champion_version or 0)
    )
