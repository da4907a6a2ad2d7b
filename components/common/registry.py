"""Registry lookups shared by evaluate (who is champion?) and register (move aliases)."""

from __future__ import annotations

from typing import Any

from components.common.tracking import TrackingError, redact

CHAMPION, PREVIOUS, CHALLENGER = "champion", "previous", "challenger"
KEY_TAG = "dailyrec_key"
"""Model-version tag identifying one training output: registering it twice finds this tag."""
PIPELINE_RUN_TAG = "pipeline_run"
"""Model-version tag naming the pipeline run that registered it (its folder under ``runs/``):
register writes it, retention keeps the runs of ``@champion`` and ``@previous`` by it."""


def _missing(exc: Exception) -> bool:
    return getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST"


def alias_version(client: Any, name: str, alias: str) -> Any | None:
    """The ModelVersion holding ``alias`` of model ``name``; None when the model or alias is absent.

    Reads the registered model's alias map rather than asking for the alias:
    stores report a missing alias with different error codes, a missing model
    consistently with RESOURCE_DOES_NOT_EXIST.
    """
    try:
        model = client.get_registered_model(name)
        version = model.aliases.get(alias)
        return None if version is None else client.get_model_version(name, str(version))
    except Exception as exc:
        if _missing(exc):
            return None
        raise TrackingError(
            f"registry at {redact(client.tracking_uri)}: cannot read alias "
            f"{name}@{alias}: {type(exc).__name__}: {exc}"
        ) from exc


def model_uri(name: str, alias: str) -> str:
    return f"models:/{name}@{alias}"


def champion_checkpoint(client: Any, name: str, dest: str) -> tuple[int, str] | None:
    """``(version, local checkpoint path)`` of ``NAME@champion``, downloaded to ``dest`` and checked
    against its registration digest (IntegrityError otherwise); None without a champion.

    The registered model keeps its weights-only checkpoint as the pyfunc
    artifact ``checkpoint``; the trainer warm-starts from it.
    """
    from components.common.integrity import WEIGHTS, verified_download

    found = alias_version(client, name, CHAMPION)
    if found is None:
        return None
    local = verified_download(client, name, found.version, dest)
    return int(found.version), str(local / WEIGHTS)
