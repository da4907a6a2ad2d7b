"""The README's picture of the daily pipeline: a Mermaid flowchart drawn from the compiled pipeline.

Nodes are the compiled tasks under their display names; a condition (``dsl.If``) and an
exit handler's body are boxes; an arrow means "runs after" (direct dependencies only: an
arrow implied by a longer path is left out); a dotted arrow marks a task that runs
whatever happened upstream (the exit handler's task). ``python -m benchmarks.readme
pipeline-graph`` rewrites the block; a test compares it with the compiled pipeline.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

ALWAYS = "ALL_UPSTREAM_TASKS_COMPLETED"
"""KFP's trigger strategy of an exit handler's task: it runs even when upstream tasks failed."""


def compiled_pipeline() -> dict[str, Any]:
    """The daily pipeline's IR, compiled now (the first YAML document; the second holds the
    platform spec)."""
    from kfp import compiler

    from pipelines.daily import daily

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pipeline.yaml"
        compiler.Compiler().compile(pipeline_func=daily, package_path=str(path))
        return next(yaml.safe_load_all(path.read_text()))


def task_names(ir: dict[str, Any]) -> list[str]:
    """The display name of every task and task group in the pipeline, nested ones included."""
    names: list[str] = []

    def walk(dag: dict[str, Any]) -> None:
        for task in dag.get("tasks", {}).values():
            names.append(task["taskInfo"]["name"])
            inner = ir["components"][task["componentRef"]["name"]].get("dag")
            if inner:
                walk(inner)

    walk(ir["root"]["dag"])
    return names


def _node_id(key: str) -> str:
    return key.replace("-", "_")


def _direct(tasks: dict[str, Any]) -> list[tuple[str, str]]:
    """Dependency edges (upstream, downstream) of one DAG without those a longer path implies."""
    deps = {key: set(task.get("dependentTasks", [])) & tasks.keys() for key, task in tasks.items()}

    def reaches(start: str, goal: str, skip: tuple[str, str]) -> bool:
        stack, seen = [start], set()
        while stack:
            node = stack.pop()
            for up in deps[node]:
                if (node, up) == skip or up in seen:
                    continue
                if up == goal:
                    return True
                seen.add(up)
                stack.append(up)
        return False

    return [
        (up, key)
        for key in _ordered(tasks)
        for up in sorted(deps[key])
        if not reaches(key, up, skip=(key, up))
    ]


def _ordered(tasks: dict[str, Any]) -> list[str]:
    """Tasks upstream first, ties by name: a stable drawing."""
    deps = {key: set(task.get("dependentTasks", [])) & tasks.keys() for key, task in tasks.items()}
    done: list[str] = []
    while len(done) < len(tasks):
        ready = sorted(k for k in tasks if k not in done and deps[k] <= set(done))
        done.append(ready[0])
    return done


def mermaid(ir: dict[str, Any]) -> str:
    """The pipeline as a fenced Mermaid flowchart (left to right)."""
    lines = ["```mermaid", "flowchart LR"]

    def draw(dag: dict[str, Any], indent: str) -> None:
        tasks = dag.get("tasks", {})
        for key in _ordered(tasks):
            task = tasks[key]
            name = task["taskInfo"]["name"]
            inner = ir["components"][task["componentRef"]["name"]].get("dag")
            if inner:
                label = f"if {name}" if "condition" in task.get("triggerPolicy", {}) else name
                lines.append(f'{indent}subgraph {_node_id(key)} ["{label}"]')
                draw(inner, indent + "  ")
                lines.append(f"{indent}end")
            else:
                lines.append(f'{indent}{_node_id(key)}["{name}"]')
        for up, down in _direct(tasks):
            always = tasks[down].get("triggerPolicy", {}).get("strategy") == ALWAYS
            arrow = " -.->|always, also after a failure| " if always else " --> "
            lines.append(f"{indent}{_node_id(up)}{arrow}{_node_id(down)}")

    draw(ir["root"]["dag"], "  ")
    return "\n".join([*lines, "```"])
