"""A local registry opened by a writer from another path.

A moved folder gets its artifact locations rewritten to where it now is; the same folder seen
through a second path (a bind mount, a symlink) is left byte for byte as it was, so two mount
paths never flip it back and forth; a folder name with ``#``, ``?`` or ``%`` is probed read-only.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from components.common.tracking import prepare_sqlite, sqlite_problem, sqlite_uri

pytestmark = pytest.mark.integration

WRITE = textwrap.dedent(
    """
    import sys
    from components.common.tracking import connect, ensure_experiment
    uri = sys.argv[1]
    client = connect(uri)
    experiment = ensure_experiment(client, "ctr", uri)
    run = client.create_run(experiment)
    client.log_text(run.info.run_id, "hello", "notes/hello.txt")
    client.set_terminated(run.info.run_id)
    print(client.get_run(run.info.run_id).info.artifact_uri)
    """
)


def _write(folder: Path, prefix: tuple[str, ...] = ()) -> str:
    done = subprocess.run(
        [*prefix, sys.executable, "-c", WRITE, sqlite_uri(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _locations(db: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute("select artifact_uri from runs")] + [
            r[0] for r in conn.execute("select artifact_location from experiments")
        ]


@pytest.mark.slow
def test_a_moved_registry_points_at_its_new_place(tmp_path, fault_report):
    fault_report(
        "registry",
        "a local registry folder moved, then opened by a writer",
        "its artifact locations rewritten to the new place, in one transaction",
    )
    old = tmp_path / "old" / "mlruns"
    _write(old)
    new = tmp_path / "new" / "mlruns"
    shutil.move(old, new)
    done = prepare_sqlite(new / "mlflow.db")
    assert done and "moved" in done
    file_locations = [x for x in _locations(new / "mlflow.db") if x.startswith("file:")]
    assert file_locations and all(x.startswith(new.resolve().as_uri()) for x in file_locations)


@pytest.mark.slow
def test_a_second_path_to_the_same_registry_rewrites_nothing(tmp_path, fault_report):
    fault_report(
        "registry",
        "a writer opens the registry through a symlink and through a second mount path",
        "nothing rewritten: the database byte for byte as it was, new runs' artifacts where "
        "the registry records them",
    )
    real = tmp_path / "real" / "mlruns"
    first = _write(real)
    link = tmp_path / "link"
    link.symlink_to(real.parent, target_is_directory=True)
    db = real / "mlflow.db"
    before = _digest(db)
    # through a symlink: the registry resolves to its own folder
    assert prepare_sqlite(link / "mlruns" / "mlflow.db") is None
    assert _digest(db) == before
    # through a bind mount: another path that does not resolve to the first, the same files
    mount = tmp_path / "mount"
    mount.mkdir()
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode:
        pytest.skip("unshare -m needs root (the symlink case above ran)")
    second = _write(
        mount / "mlruns",
        (
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount --bind "{real.parent}" "{mount}" && exec "$0" "$@"',
        ),
    )
    # the new run went where the registry records its experiment: the first path, unchanged
    assert second.startswith(real.resolve().as_uri()), second
    assert first.startswith(real.resolve().as_uri())
    assert all(x.startswith(real.resolve().as_uri()) for x in _locations(db) if "file:" in x)
    after = _digest(db)
    assert prepare_sqlite(db) is None
    assert _digest(db) == after


def test_a_registry_path_with_a_question_mark_is_refused_by_name(tmp_path, fault_report):
    fault_report(
        "registry",
        "a registry folder whose path holds '?'",
        "refused in one line naming the URI; nothing created",
    )
    from components.common.tracking import TrackingError, connect

    folder = tmp_path / "what?" / "mlruns"
    with pytest.raises(TrackingError, match=r"cannot hold '\?'.*use a folder without it"):
        connect(sqlite_uri(folder))
    assert not (tmp_path / "what?").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["runs #1", "100% local", "a=b&c"])
def test_a_registry_in_a_folder_with_uri_characters_is_probed_read_only(
    tmp_path, name, fault_report
):
    fault_report(
        "registry",
        f"a registry in a folder named {name!r}, checked and then damaged",
        "probed read-only (byte for byte as it was); the damaged file named with what to do",
    )
    folder = tmp_path / name / "mlruns"
    _write(folder)
    db = folder / "mlflow.db"
    before = _digest(db)
    assert sqlite_problem(db) is None
    assert _digest(db) == before
    # a damaged one is named, not mistaken for another file or created next to it
    db.write_bytes(b"not a database" * 100)
    problem = sqlite_problem(db)
    assert problem and problem.startswith(f"{db}: not a usable SQLite database")
    assert sorted(p.name for p in folder.iterdir()) == ["artifacts", "mlflow.db"]
