"""Offline validation of what `make deploy` would apply: built-in kinds and Kubeflow Trainer kinds.

Built-in kinds are checked with kubernetes-validate (the API server's own
OpenAPI schemas, strict: unknown fields are errors); Trainer kinds with the
CRDs' OpenAPI v3 schemas from a folder of CRD files (``../shared/schemas/crds``
in our workspace; not shipped with the repo, so absent on a user's clone).
"""

from __future__ import annotations

from pathlib import Path

import yaml

KUBERNETES_VERSION = "1.32"
DEFAULT_CRDS = Path(__file__).resolve().parents[1] / ".." / "shared" / "schemas" / "crds"


def crd_schemas(folder: str | Path | None = DEFAULT_CRDS) -> dict[tuple[str, str], dict]:
    """{(apiVersion, kind): openAPIV3Schema} of every CRD in ``folder``; empty if it is absent."""
    folder = Path(folder) if folder else None
    schemas: dict[tuple[str, str], dict] = {}
    if folder is None or not folder.is_dir():
        return schemas
    for path in sorted(folder.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return schemas


def validate_objects(objects: list[dict], schemas: dict[tuple[str, str], dict]) -> tuple[list[str], list[str]]:
    """``(problems, unchecked kinds)`` for a list of Kubernetes objects."""
    import jsonschema
    import kubernetes_validate

    problems, unchecked = [], []
    for obj in objects:
        key = (obj.get("apiVersion", ""), obj.get("kind", ""))
        where = f"{key[1]}/{(obj.get('metadata') or {}).get('name', '?')}"
        if key in schemas:
            problems += [f"{where}: {e.message} at {'/'.join(map(str, e.absolute_path))}"
                         for e in jsonschema.Draft7Validator(schemas[key]).iter_errors(obj)]
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.append(where)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{where}: {exc.message} at {'/'.join(map(str, exc.path))}")
    return problems, unchecked
