"""Registry lookups on a real MLflow registry (SQLite): who is champion, and when not knowing is an error."""

from __future__ import annotations

from types import SimpleNamespace

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    INTERNAL_ERROR,
    RESOURCE_DOES_NOT_EXIST,
    TEMPORARILY_UNAVAILABLE,
)

from components.common.registry import (
    CHALLENGER,
    CHAMPION,
    KEY_TAG,
    PREVIOUS,
    alias_version,
    champion_checkpoint,
    model_uri,
)
from components.common.tracking import TrackingError, connect, sqlite_uri

NAME = "ctr"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A registry with model ``ctr``: v1 holds a checkpoint (champion), v2 holds none (previous)."""
    root = tmp_path_factory.mktemp("registry")
    uri = sqlite_uri(root)
    client = connect(uri)
    client.create_registered_model(NAME)
    (root / "ckpt").mkdir()
    (root / "ckpt" / "b.pt").write_bytes(b"weights b")
    (root / "ckpt" / "a.pt").write_bytes(b"weights a")
    (root / "empty").mkdir()
    (root / "empty" / "notes.txt").write_text("no checkpoint here")
    sources = {}
    for folder in ("ckpt", "empty"):
        with mlflow.start_run() as run:
            mlflow.log_artifacts(str(root / folder), artifact_path="model/artifacts")
        sources[folder] = (f"{run.info.artifact_uri}/model", run.info.run_id)
    for folder in ("ckpt", "empty"):
        source, run_id = sources[folder]
        client.create_model_version(NAME, source, run_id=run_id, tags={KEY_TAG: folder})
    client.set_registered_model_alias(NAME, CHAMPION, "1")
    client.set_registered_model_alias(NAME, PREVIOUS, "2")
    return SimpleNamespace(uri=uri, client=client, root=root)


def failing(client, method: str, exc: Exception):
    """``client`` whose ``method`` raises ``exc`` (every other call is the real one)."""

    def fail(*args, **kwargs):
        raise exc

    proxy = SimpleNamespace(
        tracking_uri=client.tracking_uri,
        get_registered_model=client.get_registered_model,
        get_model_version=client.get_model_version,
    )
    setattr(proxy, method, fail)
    return proxy


def test_alias_names_and_model_uri():
    assert (CHAMPION, PREVIOUS, CHALLENGER, KEY_TAG) == (
        "champion",
        "previous",
        "challenger",
        "dailyrec_key",
    )
    assert model_uri("ctr", "champion") == "models:/ctr@champion"


def test_alias_version_reads_the_alias_map(registry):
    champion = alias_version(registry.client, NAME, CHAMPION)
    assert (champion.name, int(champion.version), champion.tags[KEY_TAG]) == (NAME, 1, "ckpt")
    assert int(alias_version(registry.client, NAME, PREVIOUS).version) == 2
    assert alias_version(registry.client, NAME, CHALLENGER) is None  # alias not set
    assert alias_version(registry.client, "no-such-model", CHAMPION) is None  # model not registered


@pytest.mark.parametrize("method", ["get_registered_model", "get_model_version"])
@pytest.mark.parametrize(
    "exc",
    [
        MlflowException("database is locked", error_code=INTERNAL_ERROR),
        MlflowException("503 from the proxy", error_code=TEMPORARILY_UNAVAILABLE),
        ConnectionError("connection reset by peer"),
    ],
)
def test_a_read_error_after_connecting_is_an_error_not_no_champion(registry, method, exc):
    """Not knowing the champion must stop the gate: treated as "none", any candidate would pass."""
    client = failing(registry.client, method, exc)
    with pytest.raises(TrackingError, match=r"cannot read alias ctr@champion: ") as info:
        alias_version(client, NAME, CHAMPION)
    assert str(info.value) == (
        f"registry at {registry.uri}: cannot read alias ctr@champion: {type(exc).__name__}: {exc}"
    )
    assert info.value.__cause__ is exc


def test_only_a_missing_model_means_no_alias(registry):
    gone = MlflowException(
        "Registered Model with name=ctr not found", error_code=RESOURCE_DOES_NOT_EXIST
    )
    assert (
        alias_version(failing(registry.client, "get_registered_model", gone), NAME, CHAMPION)
        is None
    )


def test_read_errors_do_not_leak_the_password(registry):
    client = failing(registry.client, "get_registered_model", ConnectionError("refused"))
    client.tracking_uri = "https://alice:s3cr3t-pw@mlflow.example.com"
    with pytest.raises(
        TrackingError, match=r"registry at https://\*\*\*@mlflow\.example\.com: "
    ) as info:
        alias_version(client, NAME, CHAMPION)
    assert "s3cr3t-pw" not in str(info.value)


def test_champion_checkpoint_is_none_without_champion_and_refused_without_a_digest(
    registry, tmp_path
):
    """No champion: None. A champion registered without dailyrec's digest tags is never loaded
    (the verified download itself is tested in tests/reliability/test_integrity_and_credentials.py)."""
    from components.common.integrity import IntegrityError

    registry.client.create_registered_model("fresh")
    assert champion_checkpoint(registry.client, "fresh", str(tmp_path / "none")) is None
    with pytest.raises(
        IntegrityError, match=r"^models:/ctr/1 carries no dailyrec_model_sha256 tag"
    ):
        champion_checkpoint(registry.client, NAME, str(tmp_path / "dl"))


def test_real_client_error_codes_are_what_the_lookup_expects(registry):
    """The store's own answer for an unknown model carries RESOURCE_DOES_NOT_EXIST."""
    with pytest.raises(MlflowException, match="absent") as info:
        MlflowClient(registry.uri, registry_uri=registry.uri).get_registered_model("absent")
    assert info.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_champion_checkpoint_is_the_champions_verified_weights(registry, tmp_path):
    """The champion's version number and the path of its downloaded, digest-checked weights."""
    from pathlib import Path

    from components.common.integrity import WEIGHTS, seal

    registry.client.create_registered_model("sealed")
    for n in (1, 2):
        folder = tmp_path / f"model{n}"
        (folder / "artifacts").mkdir(parents=True)
        (folder / WEIGHTS).write_bytes(f"weights of v{n}".encode())
        tags, _ = seal(folder)
        with mlflow.start_run() as run:
            mlflow.log_artifacts(str(folder), artifact_path="model")
        registry.client.create_model_version(
            "sealed", f"{run.info.artifact_uri}/model", run_id=run.info.run_id, tags=tags
        )
    registry.client.set_registered_model_alias("sealed", CHAMPION, "2")
    version, path = champion_checkpoint(registry.client, "sealed", str(tmp_path / "dl"))
    assert version == 2 and type(version) is int
    assert path.endswith(WEIGHTS) and Path(path).is_relative_to(tmp_path / "dl")
    assert Path(path).read_bytes() == b"weights of v2"
