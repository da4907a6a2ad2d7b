"""Registered models are loaded only when their files are exactly what was registered.

A registered model is a folder in the artifact store: MLmodel, the pyfunc's
``model_code.py``, its copy of the ``components`` package (``code/``), the
weights (``artifacts/model.pt``) and a few descriptions. Whoever can write to
the artifact store could change any of them, and loading a pyfunc executes its
code. So, at registration:

* the logged files are checked against what was meant to be logged (this
  package's sources, byte for byte, and the checkpoint's tensors);
* a manifest (SHA-256 of every file) is made; its own SHA-256 goes into the
  model version's tags (``dailyrec_model_sha256``, in the registry database,
  not in the artifact store), with the weights' SHA-256
  (``dailyrec_weights_sha256``); the manifest itself is stored beside the
  registering run's outputs (``integrity/manifest.json``) and in
  registration.json, to name what changed when a check fails.

With ``$DAILYREC_MODEL_SIGNING_KEY`` set (an Ed25519 private key, from a Kubernetes Secret
only the register task mounts), the digest is also signed (tag ``dailyrec_model_signature``:
:mod:`components.common.signing`) and loaders with the public key
(``$DAILYREC_MODEL_VERIFY_KEY``) require a valid signature: then not even someone who can write
the registry database -- or who holds a verifying pod -- can swap a model in.

Before loading, :func:`verified_download` downloads a version and refuses it
(:class:`IntegrityError`) unless the manifest of what arrived has the digest
in the tags. The pipeline's own stages (evaluate, the warm start) then read
only the weights, with ``torch.load(weights_only=True)``; they never execute
the pyfunc's code. Clients that want the pyfunc (scoring, ``mlflow models
serve``) load it from the verified folder:
``python -m components.common.integrity --model models:/NAME@champion --dst DIR``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from components.common.cli import Exit, cli_parser, exit_for
from components.common.registry_read import CHAMPION_URI
from components.common.signing import (
    VERIFY_KEY_ENV,
    key_id,
    private_key,
    public_key,
    sign,
    signer_of,
    verifies,
)

DIGEST_TAG = "dailyrec_model_sha256"
SIGNATURE_TAG = "dailyrec_model_signature"
WEIGHTS_TAG = "dailyrec_weights_sha256"
MANIFEST_ARTIFACT = "integrity/manifest.json"
WEIGHTS = "artifacts/model.pt"
PROFILE = "artifacts/data_profile.json"
"""The training window's profile a version carries (components/evaluate/guards.py reads it)."""
# written by MLflow into every download of a models:/ URI (name and version): not part of the model
DOWNLOAD_ONLY = ("registered_model_meta",)
_MODEL_URI = re.compile(r"models:/(?P<name>[^/@]+)(?:/(?P<version>\d+)|@(?P<alias>[A-Za-z0-9_-]+))")


class IntegrityError(RuntimeError):
    """A registered model whose files differ from what was registered (or that carries no digest)."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest(folder: str | Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``folder`` (links are refused: never followed)."""
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            raise IntegrityError(
                f"{folder}: {rel!r} is a symbolic link; a registered model holds plain files"
            )
        if path.is_file() and rel not in DOWNLOAD_ONLY:
            files[rel] = sha256_file(path)
    return files


def manifest_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(
        json.dumps(files, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def differences(expected: dict[str, str], found: dict[str, str]) -> str:
    """``changed: a; added: b; missing: c`` between two manifests."""
    parts = []
    for label, names in (
        ("changed", [k for k in found if k in expected and found[k] != expected[k]]),
        ("added", [k for k in found if k not in expected]),
        ("missing", [k for k in expected if k not in found]),
    ):
        if names:
            parts.append(
                f"{label}: " + ", ".join(sorted(names)[:5]) + (" ..." if len(names) > 5 else "")
            )
    return "; ".join(parts)


def check_logged(folder: str | Path, checkpoint: dict, model_code: Path, package: Path) -> None:
    """The logged model in ``folder`` holds exactly this package's sources, this ``model_code.py`` and the
    checkpoint's weights; IntegrityError naming the first difference otherwise."""
    import torch

    folder = Path(folder)
    logged_code = (
        folder / model_code.name
    )  # "models from code": the file is copied under its own name
    if not logged_code.is_file() or logged_code.read_bytes() != model_code.read_bytes():
        raise IntegrityError(f"{folder}: the logged model code differs from {model_code}")
    logged = folder / "code" / package.name
    ours = {
        p.relative_to(package).as_posix(): p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    theirs = {
        p.relative_to(logged).as_posix(): p
        for p in logged.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    if set(ours) != set(theirs) or any(
        ours[k].read_bytes() != theirs[k].read_bytes() for k in ours
    ):
        raise IntegrityError(f"{folder}: the logged copy of {package.name}/ differs from {package}")
    weights = torch.load(folder / WEIGHTS, map_location="cpu", weights_only=True)["model"]
    if set(weights) != set(checkpoint["model"]) or any(
        not torch.equal(weights[k], checkpoint["model"][k]) for k in weights
    ):
        raise IntegrityError(f"{folder}: the logged weights differ from the checkpoint's")


def seal(folder: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """``(version tags, manifest)`` of a checked logged model folder (signed when a key is set)."""
    files = manifest(folder)
    if WEIGHTS not in files:
        raise IntegrityError(f"{folder}: no {WEIGHTS} in the logged model")
    tags = {DIGEST_TAG: manifest_digest(files), WEIGHTS_TAG: files[WEIGHTS]}
    if (signer := private_key()) is not None:
        tags[SIGNATURE_TAG] = sign(tags[DIGEST_TAG], signer)
    return tags, files


def _stored_manifest(client: Any, run_id: str | None) -> dict[str, str] | None:
    """The manifest kept with the registering run (only used to name what changed)."""
    if not run_id:
        return None
    import mlflow

    from components.common.registry_read import local_artifact_uri

    try:
        with tempfile.TemporaryDirectory(prefix="dailyrec-manifest-") as tmp:
            root = local_artifact_uri(client.tracking_uri, client.get_run(run_id).info.artifact_uri)
            path = mlflow.artifacts.download_artifacts(
                artifact_uri=f"{root}/{MANIFEST_ARTIFACT}", dst_path=tmp
            )
            return json.loads(Path(path).read_text())
    except Exception:  # no manifest logged, or unreadable: the message then lacks the file names
        return None


def verified_download(client: Any, name: str, version: int | str, dest: str | Path) -> Path:
    """Download ``models:/name/version`` into ``dest`` and return the folder, or raise IntegrityError
    when its files' digest is not the one recorded in the version's tags at registration."""
    import mlflow

    from components.common.registry_read import local_artifact_uri

    mv = client.get_model_version(name, str(version))
    expected = (mv.tags or {}).get(DIGEST_TAG)
    where = f"models:/{name}/{version}"
    if not expected:
        raise IntegrityError(
            f"{where} carries no {DIGEST_TAG} tag (registered before digests were recorded, "
            f"or not by dailyrec): refusing to load it; register the model again"
        )
    public = public_key()
    tag = (mv.tags or {}).get(SIGNATURE_TAG, "")
    if public is not None and not verifies(tag, expected, public):
        signer = signer_of(tag)
        raise IntegrityError(
            f"{where}: its {SIGNATURE_TAG} tag is missing or does not match the digest under "
            f"the verify key {key_id(public)} (${VERIFY_KEY_ENV}): refusing to load it "
            + (
                f"(signed by key {signer})"
                if signer and signer != key_id(public)
                else "(unsigned, or the registry was altered)"
            )
        )
    # where the version's files are, as this registry's folder holds them (it may have moved)
    source = local_artifact_uri(
        client.tracking_uri, client.get_model_version_download_uri(name, str(version))
    )
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(dest)))
    files = manifest(local)
    if manifest_digest(files) != expected:
        stored = _stored_manifest(client, mv.run_id)
        what = (
            differences(stored, files)
            if stored and manifest_digest(stored) == expected
            else "the recorded manifest is unavailable or altered too"
        )
        raise IntegrityError(
            f"{where}: its files differ from what was registered ({what}); refusing to "
            f"load it (someone changed the artifact store)"
        )
    return local


def open_model(tracking_uri: str, model_uri: str) -> tuple[Any, str, int]:
    """``(client, name, version)`` of ``model_uri`` on a read-only connection to the registry
    (:func:`components.common.tracking.connect`); an absent local registry is named with it."""
    from components.common.registry_read import NoRegistry, connect_readonly

    try:
        client = connect_readonly(tracking_uri)
    except NoRegistry as exc:
        raise NoRegistry(f"{model_uri}: {exc}") from None
    return (client, *resolve_model_uri(client, model_uri))


def resolve_model_uri(client: Any, model_uri: str) -> tuple[str, int]:
    """``(name, version)`` of ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS``."""
    match = _MODEL_URI.fullmatch(model_uri)
    if not match:
        raise ValueError(
            f"model {model_uri!r}: expected models:/NAME/VERSION or models:/NAME@ALIAS "
            f"(only registered versions carry a digest to check)"
        )
    if match["version"]:
        return match["name"], int(match["version"])
    return match["name"], int(
        client.get_model_version_by_alias(match["name"], match["alias"]).version
    )


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m components.common.integrity",
        "Download a registered model and check it against the digest "
        "recorded at registration (then serve or load that folder).",
    )
    p.add_argument(
        "--model",
        default=CHAMPION_URI,
        help="models:/NAME/VERSION or models:/NAME@ALIAS",
    )
    p.add_argument("--dst", required=True, help="folder to download into")
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="default $MLFLOW_TRACKING_URI, else sqlite:///runs/mlflow.db",
    )
    args = p.parse_args(argv)
    from components.common.tracking import TrackingError, default_tracking_uri

    try:
        client, name, version = open_model(args.tracking_uri or default_tracking_uri(), args.model)
        local = verified_download(client, name, version, args.dst)
    except (IntegrityError, TrackingError, ValueError, OSError) as exc:
        print(f"integrity: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except Exception as exc:  # MlflowException: unknown model, version or alias
        print(f"integrity: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return Exit.FAILED
    print(f"models:/{name}/{version}: verified ({DIGEST_TAG} matches) in {local}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
