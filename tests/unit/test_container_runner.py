"""``make run RUNNER=docker`` without an engine: what it refuses, and how it prepares the storage
root and the pipeline for the task containers (tests/containers runs it for real)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from google.protobuf.json_format import MessageToDict

from pipelines.local import in_image
from pipelines.task_containers import IMAGE_UID, share_storage


def test_every_task_runs_in_the_given_image():
    from pipelines.daily import daily_pipeline
    from pipelines.steps import LOCAL

    daily = daily_pipeline(LOCAL)
    in_image(daily, "localhost/dailyrec-runtime:dev")
    executors = MessageToDict(daily.pipeline_spec)["deploymentSpec"]["executors"]
    assert len(executors) == 8  # every task, the exit handler's included
    assert {e["container"]["image"] for e in executors.values()} == {
        "localhost/dailyrec-runtime:dev"
    }


def test_storage_is_shared_as_fsgroup_shares_a_volume(tmp_path):
    root = tmp_path / "store"
    (root / "runs" / "r1").mkdir(parents=True)
    (root / "runs" / "mlflow.db").write_text("")
    os.chmod(root / "runs" / "mlflow.db", 0o600)
    gid = share_storage(root)
    assert gid == (IMAGE_UID if os.geteuid() == 0 else root.stat().st_gid)
    for path in (root / "runs", root / "runs" / "r1", root / "datasets"):
        mode = path.stat().st_mode
        assert mode & stat.S_ISGID and mode & 0o070 == 0o070, path
        assert path.stat().st_gid == gid
    db = (root / "runs" / "mlflow.db").stat()
    assert db.st_mode & 0o060 == 0o060 and db.st_gid == gid and not db.st_mode & 0o007


def cli(tmp_path, *extra, env=None):
    raw = tmp_path / "raw"
    (raw / "dt=2026-01-01").mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pipelines.local", "--data", str(raw)]
    command += ["--root", str(tmp_path / "store"), "--runner", "docker", *extra]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=env or os.environ
    )


def test_without_an_engine_it_says_what_to_install(tmp_path):
    env = {**os.environ, "CONTAINER_ENGINE": "no-such-engine"}
    done = cli(tmp_path, env=env)
    assert done.returncode == 2
    assert "no container engine answers (install docker or podman" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "store" / "runs").exists()


def test_a_missing_image_names_make_images(tmp_path, monkeypatch):
    from pipelines import local

    monkeypatch.setattr("pipelines.containers.engine", lambda: "podman")
    monkeypatch.setattr("pipelines.task_containers.image_present", lambda engine, image: False)
    with pytest.raises(local.LocalRunError, match="image localhost/none:dev not found in podman"):
        local.check_engine("localhost/none:dev", {})


def test_a_sqlite_registry_outside_the_root_is_refused(tmp_path):
    done = cli(tmp_path, "--set", "tracking_uri=sqlite:////elsewhere/mlflow.db")
    assert done.returncode == 2
    assert "the task containers see only the storage root" in done.stderr
    assert not (tmp_path / "store" / "runs").exists()


@pytest.mark.parametrize(("conf", "hinted"), [(None, True), ("/etc/containers/site.conf", False)])
def test_a_container_the_engine_refuses_is_one_line_with_its_fix(
    tmp_path, monkeypatch, conf, hinted
):
    """The engine's own refusal (here podman on a machine whose rlimits its defaults exceed) is
    said in one line, naming the container, with the fix when it is the known one."""
    from pipelines.containers import PODMAN_SETTINGS, ContainerError, Containers

    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\necho 'Error: runc: runc create failed: error setting rlimit type 7: "
        "operation not permitted: OCI permission denied' >&2\nexit 126\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    if conf:
        monkeypatch.setenv("CONTAINERS_CONF", conf)
    else:
        monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    engine = Containers("podman", str(tmp_path), "/mnt/x")
    with pytest.raises(ContainerError) as caught:
        engine.start("dailyrec-x-1", "localhost/img:dev", ["dask", "scheduler"], {})
    said = str(caught.value)
    assert "\n" not in said and said.startswith(
        "podman could not start container dailyrec-x-1: Error: runc: runc create failed"
    )
    assert (f"CONTAINERS_CONF={PODMAN_SETTINGS}" in said) is hinted
    assert engine.names == []  # nothing to remove: it never started
