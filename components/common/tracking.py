"""MLflow connection shared by train, evaluate and register.

* bounded retries with backoff, then one clear :class:`TrackingError`
  (MLflow's own HTTP retries would otherwise take minutes to give up);
* a SQLite tracking URI keeps its artifacts beside the database, not in
  ``./mlruns`` of whatever folder the process happens to run in;
* credentials in a URI never reach a log line or an error message.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any

import components
from components.common.progress import get_logger

log = get_logger(__name__)

# Fail fast on a dead server; our own loop below does the retrying with backoff.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
                  "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


class TrackingError(RuntimeError):
    """The tracking server or registry cannot be used; the message says which URI and why."""


def redact(uri: str) -> str:
    """``uri`` without a password (``scheme://user:secret@host`` -> ``scheme://user:***@host``)."""
    return re.sub(r"(://[^/:@]+):[^/@]+@", r"\1:***@", uri)


def sqlite_uri(folder: str | Path) -> str:
    """The default local tracking URI: ``sqlite:///<folder>/mlflow.db`` (absolute)."""
    return f"sqlite:///{(Path(folder).resolve() / 'mlflow.db').as_posix()}"


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI; None for any other URI."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///"):])


def artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """Where a new experiment keeps artifacts: beside a SQLite database; else the server decides."""
    db = sqlite_path(tracking_uri)
    if db is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment).strip("-") or "default"
    return (db.parent.resolve() / "artifacts" / slug).as_uri()


def connect(tracking_uri: str, attempts: int = 3, backoff_s: float = 1.0) -> Any:
    """An ``MlflowClient`` on ``tracking_uri`` that has answered one request.

    Retries ``attempts`` times with exponential backoff, then raises
    :class:`TrackingError`. Also makes it the process's tracking URI.
    """
    for key, value in _HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import mlflow
    from mlflow import MlflowClient

    db = sqlite_path(tracking_uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    for attempt in range(1, attempts + 1):
        try:
            client.search_experiments(max_results=1)
            # only now: the fluent API (start_run, log_model) needs it, and MLflow
            # also exports it to child processes through $MLFLOW_TRACKING_URI
            mlflow.set_tracking_uri(tracking_uri)
            mlflow.set_registry_uri(tracking_uri)
            return client
        except Exception as exc:  # connection refused, DNS, HTTP 5xx, locked or corrupt database
            if attempt == attempts:
                raise TrackingError(f"MLflow tracking at {redact(tracking_uri)} unusable after "
                                    f"{attempts} attempts: {type(exc).__name__}: "
                                    f"{redact(str(exc))[:300]}") from exc
            wait = backoff_s * 2 ** (attempt - 1)
            log.warning("MLflow tracking at %s failed (%s); retrying in %.0fs",
                        redact(tracking_uri), type(exc).__name__, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def ensure_experiment(client: Any, name: str, tracking_uri: str) -> str:
    """The id of experiment ``name``, created (artifacts beside a SQLite DB) when absent."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(tracking_uri, name))
    except Exception:  # created concurrently by another process: use theirs
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def code_version() -> str:
    """Package version + a short hash of every source file: what code produced a model."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("dailyrec")
    except PackageNotFoundError:
        package = "unknown"
    digest = hashlib.sha256()
    root = Path(components.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return f"{package}+{digest.hexdigest()[:12]}"
