"""The compiled daily pipeline (KFP IR): retries, timeouts, schedule time, artifact lineage, descriptions."""

from __future__ import annotations

import functools

import pytest
import yaml
from kfp import compiler, dsl

from pipelines.daily import daily_pipeline
from pipelines.steps import CLUSTER, LOCAL, TASK_POLICY

IDEMPOTENT = (
    "resolve-window",
    "preprocess-op",
    "estimate-op",
    "train-op",
    "evaluate-op",
    "register-op",
    "finalize",
)
PARAMETER_ONLY = {"check-parameters", "resolve-window", "preprocess-op", "finalize"}
"""Tasks with no artifact input: the parameter check and window resolution come first; preprocess's KFP
cache key must not change with a per-run artifact; the exit handler takes only the run's status."""


@functools.cache
def compiled(runner) -> tuple[dict, dict]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.yaml"
        compiler.Compiler().compile(daily_pipeline(runner), str(path))
        spec, platform = yaml.safe_load_all(path.read_text())
    return spec, platform


def all_tasks(spec: dict) -> dict[str, dict]:
    """Every task of every DAG (root, exit handler, condition), by name."""
    found = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        found.update(component.get("dag", {}).get("tasks", {}))
    return {
        name: task
        for name, task in found.items()
        if not name.startswith(("exit-handler", "condition"))
    }


def test_idempotent_tasks_retry_with_exponential_backoff_on_the_cluster():
    tasks = all_tasks(compiled(CLUSTER)[0])
    for name in IDEMPOTENT:
        policy = tasks[name]["retryPolicy"]
        retries, timeout = TASK_POLICY[name]
        assert policy["maxRetryCount"] == retries >= 1, name
        assert policy["backoffDuration"] == "60s" and policy["backoffFactor"] == 2.0, name
        # Argo counts the retry window from the first attempt: every attempt fits at its full timeout
        assert int(policy["backoffMaxDuration"].rstrip("s")) >= timeout * (retries + 1), name
    assert "retryPolicy" not in tasks["check-parameters"]  # a bad parameter stays bad


def test_every_task_has_a_timeout():
    spec, platform = compiled(CLUSTER)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name, task in all_tasks(spec).items():
        executor = spec["components"][task["componentRef"]["name"]]["executorLabel"]
        assert int(executors[executor]["activeDeadlineSeconds"]) == TASK_POLICY[name][1], name


def test_the_cluster_build_takes_the_schedule_time_and_the_local_build_does_not():
    cluster = all_tasks(compiled(CLUSTER)[0])["resolve-window"]["inputs"]["parameters"][
        "schedule_time"
    ]
    assert cluster == {"runtimeValue": {"constant": dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER}}
    local_tasks = all_tasks(compiled(LOCAL)[0])
    assert local_tasks["resolve-window"]["inputs"]["parameters"]["schedule_time"] == {
        "runtimeValue": {"constant": ""}
    }
    # kfp.local sleeps through backoffs, and its failures are deterministic: no retries there
    assert not any("retryPolicy" in task for task in local_tasks.values())


def artifact_sources(spec: dict, task: dict) -> set[str]:
    """Producer tasks of a task's artifact inputs, following the channels a condition DAG passes through."""
    sources = set()
    parents = {
        c: t
        for comp in spec["components"].values()
        for t in comp.get("dag", {}).get("tasks", {}).values()
        for c in [t["componentRef"]["name"]]
    }
    for item in task.get("inputs", {}).get("artifacts", {}).values():
        if "taskOutputArtifact" in item:
            sources.add(item["taskOutputArtifact"]["producerTask"])
        elif (
            "componentInputArtifact" in item
        ):  # passed in by the enclosing condition: look it up there
            for name, parent in parents.items():
                if item["componentInputArtifact"] in spec["components"][name].get(
                    "inputDefinitions", {}
                ).get("artifacts", {}):
                    ref = parent["inputs"]["artifacts"][item["componentInputArtifact"]][
                        "taskOutputArtifact"
                    ]
                    sources.add(ref["producerTask"])
    return sources


def test_stages_consume_their_inputs_as_artifacts_from_upstream_tasks():
    spec, _ = compiled(CLUSTER)
    tasks = all_tasks(spec)
    lineage = {name: artifact_sources(spec, task) for name, task in tasks.items()}
    for name in set(tasks) - PARAMETER_ONLY:
        assert lineage[name], f"{name} takes no artifact from an upstream task"
    assert lineage["estimate-op"] == {"preprocess-op"}
    assert lineage["train-op"] == {"preprocess-op", "estimate-op"}
    assert lineage["evaluate-op"] == {"preprocess-op", "train-op"}
    assert lineage["register-op"] == {"train-op", "evaluate-op"}
    # no path strings between stages any more: the dataset, plan and model travel as artifacts
    for name in ("estimate-op", "train-op", "evaluate-op", "register-op"):
        params = tasks[name]["inputs"].get("parameters", {})
        assert not {"data_dir", "plan_path", "checkpoint"} & set(params), name


def test_every_component_input_and_output_has_a_description():
    spec, _ = compiled(CLUSTER)
    for name, component in spec["components"].items():
        if "executorLabel" not in component:
            continue  # DAGs the compiler makes for the exit handler and the condition
        for side in ("inputDefinitions", "outputDefinitions"):
            for kind in ("parameters", "artifacts"):
                for key, definition in component.get(side, {}).get(kind, {}).items():
                    assert len(definition.get("description", "")) >= 8, f"{name} {side} {key}"


@pytest.mark.parametrize("component", ["comp-preprocess-op", "comp-train-op", "comp-register-op"])
def test_outputs_are_typed_artifacts(component):
    outputs = compiled(CLUSTER)[0]["components"][component]["outputDefinitions"]["artifacts"]
    titles = {name: a["artifactType"]["schemaTitle"] for name, a in outputs.items()}
    assert (
        titles
        == {
            "comp-preprocess-op": {"dataset": "system.Dataset"},
            "comp-train-op": {"model": "system.Model"},
            "comp-register-op": {"registration": "system.Artifact"},
        }[component]
    )


def test_the_exit_handler_holds_container_tasks_only():
    """A KFP backend recomputes a DAG's state only after a container task inside it finishes
    (launcher_v2.go -> UpdateDAGExecutionsState; one level deep before 2.17): a sub-DAG (dsl.If,
    ParallelFor) inside the exit handler leaves the state its handler sees stale (RUNNING)."""
    for runner in (CLUSTER, LOCAL):
        spec, _ = compiled(runner)
        root = spec["root"]["dag"]["tasks"]
        handler = next(t for name, t in root.items() if name.startswith("exit-handler"))
        body = spec["components"][handler["componentRef"]["name"]]["dag"]["tasks"]
        assert "register-op" in body
        for name, task in body.items():
            component = spec["components"][task["componentRef"]["name"]]
            assert "executorLabel" in component and "dag" not in component, name
            assert "triggerPolicy" not in task, f"{name} runs under a condition"


@pytest.mark.parametrize("env", ["a100", "local"])
def test_a_runs_worst_case_ends_before_the_next_days_run(env):
    """Every task at its timeout on every attempt, every backoff waited: still inside the run's
    deadline, and that inside the schedule's period (max concurrency 1, no catch-up: a longer run
    would make the next day wait or be skipped)."""
    import json

    from kube.types import TrainJobTarget, cluster_target
    from pipelines.steps import RUN_DEADLINE_S, SCHEDULE_PERIOD_S, TASK_POLICY, run_budget

    target = TrainJobTarget(**json.loads(cluster_target(env))["trainjob"])
    budget = run_budget(target)
    assert set(budget) == set(TASK_POLICY)
    assert sum(budget.values()) <= RUN_DEADLINE_S < SCHEDULE_PERIOD_S, budget
    # one attempt of the train task can follow its TrainJob to the job's own deadline
    assert TASK_POLICY["train-op"][1] >= target.timeout_s + 2 * target.poll_s
    # the TrainJob's deadline bounds the GPU time of a run: one job per run
    assert target.timeout_s <= 8 * 3600


def test_the_cluster_build_carries_the_run_deadline_and_the_local_build_does_not():
    from pipelines.steps import DEFAULT_TTL, RUN_DEADLINE_S

    cluster = compiled(CLUSTER)[1]["platforms"]["kubernetes"]
    assert cluster["pipelineConfig"]["activeDeadlineSeconds"] == RUN_DEADLINE_S
    # a finished run's pods and logs: kept short after success, a week after failure (Argo's
    # default keeps a day whatever the outcome: a Friday night failure is gone by Monday)
    assert cluster["pipelineConfig"]["resourceTtlOnSuccess"] == DEFAULT_TTL.success_s
    assert cluster["pipelineConfig"]["resourceTtlOnFailure"] == DEFAULT_TTL.failure_s >= 7 * 86400
    local = compiled(LOCAL)[1] or {}
    assert "pipelineConfig" not in (local.get("platforms", {}).get("kubernetes") or {})


def test_evaluate_is_sized_from_the_test_split_by_the_estimate_task():
    """Requests = limits from estimate's outputs (the driver resolves them at run time)."""
    spec, _ = compiled(CLUSTER)
    evaluate = all_tasks(spec)["evaluate-op"]
    executor = spec["components"][evaluate["componentRef"]["name"]]["executorLabel"]
    resources = spec["deploymentSpec"]["executors"][executor]["container"]["resources"]
    for key, output in (
        ("resourceCpuRequest", "evaluate_cpu"),
        ("resourceCpuLimit", "evaluate_cpu"),
        ("resourceMemoryRequest", "evaluate_memory"),
        ("resourceMemoryLimit", "evaluate_memory"),
    ):
        channel = f"pipelinechannel--estimate-op-{output}"
        assert resources[key] == f"{{{{$.inputs.parameters['{channel}']}}}}", key
        assert evaluate["inputs"]["parameters"][channel]["taskOutputParameter"] == {
            "outputParameterKey": output,
            "producerTask": "estimate-op",
        }


def test_the_evaluate_pod_grows_with_the_test_day():
    from components.evaluate.resources import evaluate_resources

    row = 20 * 4 + 1  # hist_item int32 [20], label uint8
    small = evaluate_resources(2_500, row)
    big = evaluate_resources(10_000_000, row)
    assert small == ("2", "8Gi")
    assert int(big[0]) == 5 and int(big[1].removesuffix("Gi")) >= 5
    huge = evaluate_resources(200_000_000, row)
    assert huge[0] == "16" and int(huge[1].removesuffix("Gi")) > 20


def test_baking_a_parameter_read_outside_the_root_tasks_is_refused():
    from pipelines.compile import BakeError, bake

    def spec(extra: dict) -> dict:
        return {
            "root": {
                "inputDefinitions": {
                    "parameters": {"launcher": {"defaultValue": "local"}, "run_date": {}}
                },
                "dag": {
                    "tasks": {
                        "t": {
                            "inputs": {"parameters": {"l": {"componentInputParameter": "launcher"}}}
                        }
                    },
                    **extra,
                },
            }
        }

    baked = bake(spec({}), ("launcher",))
    assert baked["root"]["inputDefinitions"]["parameters"] == {"run_date": {}}
    assert baked["root"]["dag"]["tasks"]["t"]["inputs"]["parameters"]["l"] == {
        "runtimeValue": {"constant": "local"}
    }
    with pytest.raises(BakeError, match=r"\['launcher'\] are still read outside"):
        bake(spec({"outputs": {"x": {"componentInputParameter": "launcher"}}}), ("launcher",))
