"""The Kubernetes calls dailyrec's code makes, derived from the code itself: our own client
(the kubernetes package's generated methods) and dask-kubernetes' KubeCluster as installed (its
kr8s calls, followed from what our code starts: ``_start`` and ``_close``). The Roles are held
to these sets (tests/deploy/test_rbac_calls.py, tests/reliability/test_security.py)."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN_CLIENTS = ("kube/client.py",)
"""Every module of ours that calls the Kubernetes API (a test below checks none is missed)."""

# kubernetes' generated method names: <verb>_namespaced_<kind>; read_ is a get
K8S_VERBS = {"create": "create", "read": "get", "get": "get", "list": "list", "delete": "delete"}
K8S_VERBS |= {"patch": "patch", "replace": "update"}
CORE_KINDS = {"pod": "pods", "pod_log": "pods/log", "event": "events", "service": "services"}


def _literal(node: ast.AST, module) -> str:
    """A call argument's value: a literal, or a module attribute such as ``tj.GROUP``."""
    if isinstance(node, ast.Constant):
        return node.value
    return eval(compile(ast.Expression(node), "<arg>", "eval"), vars(module))  # noqa: S307


def own_calls() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every kubernetes-client call in our modules."""
    triples = set()
    for path in OWN_CLIENTS:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            verb, _, kind = node.func.attr.partition("_namespaced_")
            if not kind:
                continue
            if kind == "custom_object":
                group, plural = (_literal(node.args[i], module) for i in (0, 3))
                triples.add((group, plural, K8S_VERBS[verb]))
            else:
                triples.add(("", CORE_KINDS[kind], K8S_VERBS[verb]))
    return triples


# kr8s operations and the requests they make (kr8s _objects.py / _api.py): an object fetched by
# name with Class.get() is a *list* with a metadata.name field selector; exists/ready/refresh
# re-read it by name (get); wait() reads it and then watches.
KR8S_METHODS = {
    "create": ("create",),
    "delete": ("delete",),
    "exists": ("get",),
    "ready": ("get",),
    "refresh": ("get",),
    "patch": ("patch",),
    "scale": ("patch",),
    "label": ("patch",),
    "annotate": ("patch",),
    "wait": ("get", "watch"),
    "watch": ("watch",),
}
NOT_IN_A_CLUSTER = {
    "port_forward_service": "reached only where the scheduler Service's DNS name does not "
    "resolve: outside a cluster (networking.py get_external_address_for_scheduler_service)",
    "port_forward_dashboard": "the same, for the dashboard",
}
"""dask-kubernetes functions our preprocess pod never reaches, and why."""


def _resource(cls) -> tuple[str, str]:
    group = cls.version.rpartition("/")[0] if "/" in cls.version else ""
    return group, cls.endpoint


def dask_kubernetes_calls() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of the kr8s calls KubeCluster makes from ``_start`` and ``_close``,
    following its own methods and the module functions they call."""
    from dask_kubernetes.operator import networking
    from dask_kubernetes.operator.kubecluster import kubecluster

    classes = {
        name: obj
        for module in (kubecluster, networking)
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and hasattr(obj, "endpoint") and hasattr(obj, "version")
    }
    functions = {
        name: obj
        for module in (kubecluster, networking)
        for name, obj in vars(module).items()
        if inspect.isfunction(obj) and obj.__module__ == module.__name__
    }
    methods = dict(inspect.getmembers(kubecluster.KubeCluster, inspect.isfunction))
    triples: set[tuple[str, str, str]] = set()
    seen: set[str] = set()
    todo = [("method", "_start"), ("method", "_close")]
    while todo:
        kind, name = todo.pop()
        if (kind, name) in seen or name in NOT_IN_A_CLUSTER:
            continue
        seen.add((kind, name))
        fn = methods[name] if kind == "method" else functions[name]
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        typed: dict[str, str] = {}  # variable -> kr8s class, from `x = await Cls(...)/Cls.get(...)`
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Await):
                call = node.value.value
                if isinstance(call, ast.Call):
                    head = call.func.value if isinstance(call.func, ast.Attribute) else call.func
                    if isinstance(head, ast.Name) and head.id in classes:
                        for target in node.targets:
                            if isinstance(target, ast.Name):
                                typed[target.id] = head.id
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in functions:
                todo.append(("function", func.id))
            if not isinstance(func, ast.Attribute):
                continue
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id == "self" and func.attr in methods:
                todo.append(("method", func.attr))
            elif isinstance(owner, ast.Name) and owner.id in classes and func.attr == "get":
                triples.add((*_resource(classes[owner.id]), "list"))
            elif isinstance(owner, ast.Name) and owner.id in typed:
                resource = _resource(classes[typed[owner.id]])
                if func.attr == "logs":
                    triples.add((resource[0], f"{resource[1]}/log", "get"))
                for verb in KR8S_METHODS.get(func.attr, ()):
                    triples.add((*resource, verb))
            elif ast.unparse(func) == "kr8s.asyncio.get":
                kind = node.args[0].value
                if kind != "nodes":  # a NodePort Service only; ours is a ClusterIP (asserted)
                    triples.add(("", kind, "list"))
    return triples


def role_triples(role: dict) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule of a Role."""
    triples = set()
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        triples |= {
            (g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
        }
    return triples


KFP_RUNTIME_RULES = {
    ("", "secrets", "get"),
    ("", "configmaps", "get"),
    *(("argoproj.io", "workflowtaskresults", v) for v in ("create", "patch")),
}
"""What KFP's driver/launcher and Argo's executor need in each pipeline pod (a subset of KFP's own
pipeline-runner Role): the object store's Secret and the kfp-launcher ConfigMap, one Get each
(kubeflow/pipelines backend/src/v2/config/env.go), Argo's task results."""
