"""Readers never write the registry.

Serving, batch scoring, integrity checks and the champion lookups of evaluate, train (warm
start) and finalize open a local registry read-only: a copy or a moved folder is read where its
artifacts now are, its database stays byte for byte as it was, and a write through a reader's
connection is refused by SQLite itself.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.common.tracking import sqlite_uri
from tests.serving_world import DAY5, NAME

pytestmark = pytest.mark.integration


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
def test_readers_leave_a_copied_registry_as_it_was(
    world,
    registered,
    tmp_path,
    fault_report,
):
    from mlflow.exceptions import MlflowException

    from components.common.registry import champion_checkpoint
    from components.common.registry_read import NoRegistry, connect_readonly
    from pipelines.finalize import champion_version, protected_runs
    from tests.conftest import write_day

    original = world["root"] / "mlruns"
    copy = tmp_path / "a copy" / "mlruns"
    shutil.copytree(original, copy)
    db = copy / "mlflow.db"
    before = _digest(db)
    hidden = original.with_name("mlruns-away")
    original.rename(hidden)  # what the copy records points nowhere now
    try:
        uri = sqlite_uri(copy)
        verified = _run(
            "components.common.integrity",
            "--model",
            f"models:/{NAME}@champion",
            "--dst",
            str(tmp_path / "verified"),
            "--tracking-uri",
            uri,
        )
        assert verified.returncode == 0, verified.stderr
        raw = tmp_path / "raw"
        write_day(raw, DAY5, world["raw"][DAY5])
        scored = _run(
            "components.score",
            "--raw",
            str(raw),
            "--date",
            DAY5.isoformat(),
            "--model",
            f"models:/{NAME}@champion",
            "--tracking-uri",
            uri,
            "--out",
            str(tmp_path / "scores.parquet"),
        )
        assert scored.returncode == 0, scored.stderr
        assert champion_version(uri, NAME) == 1
        assert protected_runs(uri, NAME) == set()  # registered outside a pipeline run
        client = connect_readonly(uri)
        version, checkpoint = champion_checkpoint(client, NAME, str(tmp_path / "champion"))
        assert version == 1 and Path(checkpoint).is_file()
        with pytest.raises(MlflowException, match="readonly database"):
            client.set_registered_model_alias(NAME, "probe", "1")
        assert _digest(db) == before
        assert sorted(p.name for p in copy.iterdir()) == ["artifacts", "mlflow.db"]
        # where nothing was registered a reader creates nothing
        with pytest.raises(NoRegistry, match="no MLflow registry there"):
            connect_readonly(sqlite_uri(tmp_path / "empty"))
        assert not (tmp_path / "empty").exists()
        assert champion_version(sqlite_uri(tmp_path / "empty"), NAME) is None
        assert protected_runs(sqlite_uri(tmp_path / "empty"), NAME) == set()
        assert not (tmp_path / "empty").exists()
    finally:
        hidden.rename(original)
    fault_report(
        "registry",
        "a copied registry read by integrity, batch scoring and the champion lookups",
        "read where its artifacts now are; the database byte for byte as it was, a write "
        "through a reader refused by SQLite; an absent registry never created",
    )


def test_a_readonly_uri_names_exactly_its_file(tmp_path):
    from components.common.registry_read import database, readonly_uri

    for name in ("plain", "a space", "hash #1", "per%25cent", "q?mark"):
        db = tmp_path / name / "mlflow.db"
        uri = readonly_uri(db)
        assert uri.endswith("?mode=ro&uri=true") and "#" not in uri and " " not in uri
        assert database(uri) == db.resolve()


def test_a_reader_creates_nothing_where_it_runs(tmp_path, monkeypatch, fault_report):
    """MLflow makes the folder above a SQLite URI's path: a reader's URI leaves none behind in
    the working directory (a ``file:/...`` folder tree in a user's checkout)."""
    from components.common.registry_read import connect_readonly
    from components.common.tracking import connect, sqlite_uri

    db = tmp_path / "store" / "mlflow.db"
    connect(sqlite_uri(db)).search_experiments()  # a registry, as a writer leaves it
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    client = connect_readonly(sqlite_uri(db))
    assert client.search_registered_models() == []
    assert list(here.iterdir()) == []
    fault_report(
        "registry",
        "a reader opens the registry from another working directory",
        "nothing is created there (MLflow's folder for the database is never made)",
    )
