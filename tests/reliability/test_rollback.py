"""A rollback moves ``@champion`` with the register stage's guards: the storage root's lock, the
integrity check of the version it promotes, and compare-and-set on the alias. Real MLflow (SQLite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.common.integrity import DIGEST_TAG, manifest, manifest_digest
from components.common.lock import TOKEN_ENV, storage_lock
from components.common.registry import CHAMPION, PREVIOUS, alias_version
from components.common.tracking import connect, sqlite_uri
from components.register import rollback as R

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def aliases(uri: str) -> dict[str, int]:
    client = connect(uri)
    return {
        a: int(v.version) for a in (CHAMPION, PREVIOUS) if (v := alias_version(client, "ctr", a))
    }


@pytest.fixture
def two_versions(tiny_dataset, tmp_path):
    """v1 then v2 registered as champion (v1 @previous) in ``<root>/runs/mlflow.db``."""
    from tests.checkpoints import earlier_window
    from tests.evaluations import register_forced

    uri = sqlite_uri(tmp_path / "runs")
    for version, champion in ((1, None), (2, 1)):  # two days, in turn
        window = earlier_window(tiny_dataset, days=2 - version)
        register_forced(
            tiny_dataset,
            tmp_path / f"v{version}",
            uri,
            version,
            window=window,
            champion_version=champion,
        )
    assert aliases(uri) == {CHAMPION: 2, PREVIOUS: 1}
    return uri, tmp_path


def run_rollback(uri: str, *extra: str) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k != TOKEN_ENV
    }  # another process: not the lock's holder
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "components.register.rollback",
            "--model-name",
            "ctr",
            "--tracking-uri",
            uri,
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_rollback_promotes_a_verified_version_and_a_second_undoes_it(two_versions):
    uri, _ = two_versions
    assert R.rollback(uri, "ctr") == {"champion": 1, "previous": 2}
    assert aliases(uri) == {CHAMPION: 1, PREVIOUS: 2}
    assert R.rollback(uri, "ctr") == {"champion": 2, "previous": 1}
    assert aliases(uri) == {CHAMPION: 2, PREVIOUS: 1}


def test_rollback_refuses_a_tampered_version_and_moves_nothing(two_versions, fault_report):
    uri, root = two_versions
    client = connect(uri)
    versions = {int(mv.version): mv for mv in client.search_model_versions("name='ctr'")}
    # tamper with version 1's weights: the model folder whose digest is v1's
    folders = {p.parent for p in (root / "runs" / "artifacts").rglob("MLmodel")}
    (v1_dir,) = [d for d in folders if manifest_digest(manifest(d)) == versions[1].tags[DIGEST_TAG]]
    weights = v1_dir / "artifacts" / "model.pt"
    weights.write_bytes(weights.read_bytes() + b"\0")
    done = run_rollback(uri)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "rollback: error: models:/ctr/1: its files differ from what was registered (changed: artifacts/model.pt)"
        )
    )
    assert aliases(uri) == {CHAMPION: 2, PREVIOUS: 1}
    fault_report(
        "security",
        "rollback to a version whose files changed in the artifact store",
        "refused with the changed file named; no alias moves",
    )


def test_rollback_waits_for_no_one_while_a_run_holds_the_lock(two_versions, fault_report):
    uri, root = two_versions
    with storage_lock(root, "20261130-0200-ab12", stage="register"):
        done = run_rollback(uri)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"rollback: error: another run holds the lock on {root / 'runs' / '.lock'} (run 20261130-0200-ab12, "
            "stage register"
        )
    )
    assert aliases(uri) == {CHAMPION: 2, PREVIOUS: 1}
    fault_report(
        "concurrency",
        "rollback while a run's register stage holds the storage lock",
        "refused at once naming the holder; no alias moves",
    )


def test_rollback_is_compare_and_set_on_the_champion(two_versions, monkeypatch, fault_report):
    uri, _ = two_versions
    real = R.verified_download

    def meanwhile(client, name, version, dest):  # another writer moves champion mid-rollback
        client.set_registered_model_alias(name, CHAMPION, "1")
        return real(client, name, version, dest)

    monkeypatch.setattr(R, "verified_download", meanwhile)
    with pytest.raises(
        R.ChampionMoved,
        match=r"^ctr@champion moved from v2 to v1 during the rollback; nothing "
        r"moved",
    ):
        R.rollback(uri, "ctr")
    assert aliases(uri) == {CHAMPION: 1, PREVIOUS: 1}  # only the other writer's move happened
    fault_report(
        "concurrency",
        "champion moved by another writer during a rollback",
        "compare-and-set: the rollback moves nothing and says so",
    )


def test_rollback_lock_root_is_the_registrys_storage_root(tmp_path):
    assert R.lock_root(sqlite_uri(tmp_path / "runs"), None) == tmp_path.resolve()
    assert R.lock_root(sqlite_uri(tmp_path / "elsewhere"), None) is None
    assert R.lock_root("http://mlflow:5000", None) is None
    assert R.lock_root("http://mlflow:5000", "/mnt/dailyrec") == Path("/mnt/dailyrec")
