"""Read-only access to the MLflow registry, for what only reads it.

Serving, batch scoring, integrity checks and the champion lookups of evaluate, warm start and
the exit handler never write the registry (:mod:`components.common.tracking` connects writers):

* a local SQLite registry is opened read-only (SQLite's ``mode=ro``: a write fails, nothing is
  created), so a read-only copy serves and its database stays byte for byte as it was;
* it is never created, repaired or relocated: an absent one is :class:`NoRegistry`;
* a moved, copied or re-mounted registry records its artifacts under its old folder; they are
  found where they now are by translating each location at read time
  (:func:`local_artifact_uri`), without rewriting the database;
* the process's tracking URI stays the writer's: a run logging in the same process (evaluate)
  keeps logging where it did.

A tracking server is reached through :func:`components.common.tracking.connect` (it writes
nothing on connecting).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse
from urllib.request import url2pathname

from components.common.tracking import TrackingError, sqlite_path, sqlite_problem

MODEL_NAME = "dailyrec"
"""The registered model every stage writes and reads unless told another name."""
CHAMPION_URI = f"models:/{MODEL_NAME}@champion"
"""What serving and batch scoring load by default: the registered model's ``@champion``."""
WINDOW_TAG = "window"
"""A version's tag naming its training window, ``start..end`` (ISO days)."""


def filter_literal(value: str) -> str:
    """``value`` as a string of an MLflow search filter (``name = ...``). MLflow takes a string
    between single or double quotes as it is, with no escapes, so a value holding one kind of quote
    is written between the other; one holding both cannot be searched for (a ValueError)."""
    value = str(value)
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(
        f"model_name {value!r}: a name holding both kinds of quote cannot be searched for in MLflow"
    )


def window_end(tags: dict) -> str | None:
    """The last day of a version's training window from its tags (None if not recorded)."""
    window = tags.get(WINDOW_TAG) or ""
    if ".." in window:
        return window.split("..")[-1]
    try:  # versions registered before the window had a tag of its own
        return json.loads(tags.get("dataset_window") or "null")["end"]
    except (TypeError, ValueError, KeyError):
        return None


class NoRegistry(TrackingError):
    """A reader's SQLite registry does not exist (nothing registered there yet)."""


def readonly_uri(db: Path) -> str:
    """A URI that opens ``db`` read-only. Quoted twice: SQLAlchemy unquotes the name once, SQLite
    once more, so a space, ``#`` or ``%`` in the path cannot cut the name short (and drop
    ``mode=ro`` with it). The slashes are quoted too: MLflow creates the "parent folder" of what
    follows ``sqlite:///``, which for ``file:/a/b`` would be a folder ``file:/a`` in the reader's
    working directory; with no slash left its parent is ``.``, and nothing is created."""
    name = quote(quote(db.resolve().as_posix(), safe=""), safe="")
    return f"sqlite:///file:{name}?mode=ro&uri=true"


def database(tracking_uri: str) -> Path | None:
    """The SQLite file of a tracking URI, a :func:`readonly_uri` included; None for a server."""
    rest = tracking_uri[len("sqlite:///") :] if tracking_uri.startswith("sqlite:///") else ""
    if rest.startswith("file:"):
        return Path(unquote(unquote(rest[len("file:") :].split("?", 1)[0])))
    return sqlite_path(tracking_uri)


def connect_readonly(tracking_uri: str, attempts: int = 3) -> Any:
    """An ``MlflowClient`` that reads the registry at ``tracking_uri`` and cannot write it.

    A local registry answers at once or not at all, so it is asked once: an absent one is
    :class:`NoRegistry`, a damaged or outdated one :class:`TrackingError` naming what to do."""
    db = sqlite_path(tracking_uri)
    if db is None:
        from components.common.tracking import connect

        return connect(tracking_uri, attempts)
    if not db.is_file():
        raise NoRegistry(f"{db}: no MLflow registry there (nothing registered yet)")
    from mlflow import MlflowClient

    uri = readonly_uri(db)
    try:  # MLflow reads the schema as it builds its store: a damaged file fails here already
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        client.search_experiments(max_results=1)
    except Exception as exc:  # damaged, half-created (MLflow tried to create its tables), locked
        problem = sqlite_problem(db) or f"{db}: unreadable: {type(exc).__name__}: {exc}"[:400]
        raise TrackingError(problem) from exc
    return client


def _recorded_root(db: Path) -> str | None:
    """The folder (``file://`` URI) a registry recorded its artifacts under: the part of an
    experiment's location before ``/artifacts/``."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True)) as conn:
        for (location,) in conn.execute("select artifact_location from experiments"):
            if location and location.startswith("file://") and "/artifacts/" in location:
                return location[: location.rindex("/artifacts/")]
    return None


def local_artifact_uri(tracking_uri: str, uri: str) -> str:
    """``uri`` as this registry's folder holds it, read without rewriting the registry.

    A local registry records absolute ``file://`` locations; read from another path (moved,
    copied, mounted elsewhere), a location under the recorded folder's ``artifacts/`` that does
    not exist maps to the same place under this database's folder. Any other URI, and one that
    exists as recorded, is returned unchanged."""
    db = database(tracking_uri)
    if db is None or not uri.startswith("file://") or not db.is_file():
        return uri
    if Path(url2pathname(urlparse(uri).path)).exists():
        return uri
    old = _recorded_root(db)
    prefix = f"{old}/artifacts/"
    if old is None or not uri.startswith(prefix):
        return uri
    return f"{db.parent.resolve().as_uri()}/artifacts/{uri[len(prefix) :]}"
