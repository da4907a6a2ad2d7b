"""Offline validation of what `make deploy` would apply and the pipeline creates: built-in kinds,
Kubeflow Trainer kinds, DaskClusters.

Built-in kinds are checked with kubernetes-validate (the API server's own
OpenAPI schemas, strict: unknown fields are errors); Trainer kinds with the
CRDs' OpenAPI v3 schemas from a folder of CRD files (``manifests/schemas/crds``,
Kubeflow Trainer v2.3.0, carried in the repository), made strict the same way
(``kubectl --validate=strict``: an unknown or misspelt field is an error), and
their CEL rules (``x-kubernetes-validations``) evaluated with cel-python, as the
API server does on create (transition rules, which compare with ``oldSelf``,
apply only to updates and are skipped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

KUBERNETES_VERSION = "1.32"
DEFAULT_CRDS = Path(__file__).resolve().parents[1] / "manifests" / "schemas" / "crds"


def strict_schema(schema: Any) -> Any:
    """The schema with unknown fields refused, as the API server's strict field validation does.

    A CRD schema lists ``properties`` without ``additionalProperties``: plain JSON Schema then
    accepts any extra key, while the API server prunes (or, strict, refuses) it, so a misspelt
    field or one removed in a Trainer release would vanish silently.
    """
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schemas(folder: str | Path | None = DEFAULT_CRDS) -> dict[tuple[str, str], dict]:
    """{(apiVersion, kind): strict openAPIV3Schema} of every CRD in ``folder``; empty if it is absent."""
    folder = Path(folder) if folder else None
    schemas: dict[tuple[str, str], dict] = {}
    if folder is None or not folder.is_dir():
        return schemas
    for path in sorted(folder.glob("*.yaml")):
        # the C loader: these files are ~0.5 MB each, the pure-Python one takes seconds
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schemas[(f"{group}/{version['name']}", kind)] = strict_schema(
                version["schema"]["openAPIV3Schema"]
            )
    return schemas


_PROGRAMS: dict[str, Any] = {}


def _program(rule: str) -> Any:
    import celpy

    if rule not in _PROGRAMS:
        env = celpy.Environment()
        _PROGRAMS[rule] = env.program(env.compile(rule))
    return _PROGRAMS[rule]


def cel_problems(schema: dict, value: Any, path: str = "") -> list[str]:
    """The ``x-kubernetes-validations`` rules of ``schema`` (and of every nested schema) that
    ``value`` breaks, each as "message (rule) at path"."""
    import celpy

    problems = []
    for check in schema.get("x-kubernetes-validations") or []:
        rule = check["rule"]
        if "oldSelf" in rule:  # a transition rule: only on update, against the stored object
            continue
        try:
            ok = _program(rule).evaluate({"self": celpy.json_to_cel(value)})
        except celpy.CELEvalError as exc:  # e.g. a field the rule reads is absent
            ok = exc
        if ok is not True and not (isinstance(ok, celpy.celtypes.BoolType) and bool(ok)):
            message = check.get("message") or f"failed rule: {rule}"
            problems.append(f"{message} ({rule}) at {path or '/'}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                problems += cel_problems(sub, item, f"{path}/{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += cel_problems(schema["items"], item, f"{path}/{i}")
    return problems


def validate_objects(
    objects: list[dict], schemas: dict[tuple[str, str], dict]
) -> tuple[list[str], list[str]]:
    """``(problems, unchecked kinds)`` for a list of Kubernetes objects."""
    import jsonschema
    import kubernetes_validate

    problems, unchecked = [], []
    for obj in objects:
        key = (obj.get("apiVersion", ""), obj.get("kind", ""))
        where = f"{key[1]}/{(obj.get('metadata') or {}).get('name', '?')}"
        if key in schemas:
            problems += [
                f"{where}: {e.message} at {'/'.join(map(str, e.absolute_path))}"
                for e in jsonschema.Draft7Validator(schemas[key]).iter_errors(obj)
            ]
            problems += [f"{where}: {p}" for p in cel_problems(schemas[key], obj)]
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.append(where)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{where}: {exc.message} at {'/'.join(map(str, exc.path))}")
    return problems, unchecked


def validate_cluster_spec(spec: dict, kubernetes_version: str = "1.32") -> list[str]:
    """Problems of a DaskCluster spec, offline: the operator's CRD schema, then its pods as Pods."""
    import dask_kubernetes.operator as operator
    import jsonschema
    import kubernetes_validate

    templates = yaml.safe_load(
        (Path(operator.__file__).parent / "customresources" / "templates.yaml").read_text()
    )
    definitions = templates["definitions"]

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref:  # the operator's own types resolve here; Kubernetes ones (PodSpec) are
                # checked below with kubernetes-validate
                return resolve(definitions.get(ref.rsplit("/", 1)[-1], {"type": "object"}))
            return {k: resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node

    problems = [
        f"DaskCluster: {e.message} at {'/'.join(map(str, e.absolute_path))}"
        for e in jsonschema.Draft7Validator(
            resolve(definitions["dask.k8s.api.v1.DaskCluster"])
        ).iter_errors(spec)
    ]
    for role in ("scheduler", "worker"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{role}"},
            "spec": spec["spec"][role]["spec"],
        }
        try:
            kubernetes_validate.validate(pod, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{role} pod: {exc.message}")
    return problems
