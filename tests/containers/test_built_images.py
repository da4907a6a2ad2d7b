"""The built images keep the deploy's promises (``make images test-images``).

Everything the cluster will run is checked inside the image it runs in: the containers come from
``make deploy DRY_RUN=1``'s own files for these very image references (KFP tasks, TrainingRuntime,
TrainJob, Katib trial, DaskCluster), not from a copy in this test.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pipelines.deploy import DeployConfig, deploy, rendered_containers
from tests.commands import DOCUMENTED_SCHEMES, commands_of
from tests.containers.conftest import run_in

pytestmark = pytest.mark.images
ROOT = Path(__file__).resolve().parents[2]
STAGES = sorted(p.parent.name for p in (ROOT / "components").glob("*/__main__.py"))
USER = "10001"


def test_each_image_runs_as_its_non_root_user_and_its_requirements_hold(images):
    engine, refs = images
    for name, ref in refs.items():
        done = run_in(engine, ref, "id -u; id -g; pip check")
        lines = done.stdout.split("\n")
        assert lines[:2] == [USER, USER], (name, done.stdout, done.stderr)
        assert done.returncode == 0 and "No broken requirements found." in done.stdout, (
            name,
            done.stdout + done.stderr,
        )


def check_script(containers: list[dict]) -> str:
    """A shell script printing ``MISSING ...`` for each executable or module not in the image."""
    lines = []
    for container in containers:
        for executable, module in commands_of(container["argv"]):
            where = shlex.quote(container["where"])
            lines.append(
                f"command -v {shlex.quote(executable)} >/dev/null || "
                f"echo MISSING {shlex.quote(executable)} in {where}"
            )
            if module:
                probe = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
                lines.append(
                    f"python -c {shlex.quote(probe)} || echo MISSING module {module} in {where}"
                )
    return "\n".join(dict.fromkeys(lines)) + "\necho checked"


def test_every_rendered_command_resolves_inside_its_image(images, tmp_path):
    engine, refs = images
    registry, tag = refs["runtime"].rsplit("/dailyrec-runtime:", 1)
    out = tmp_path / "deploy"
    deploy(DeployConfig(env="a100", registry=registry, tag=tag, dry_run=True, out=str(out)))
    containers = rendered_containers(out)
    checked = 0
    for ref in refs.values():
        mine = [c for c in containers if c["image"] == ref]
        assert mine, f"the deploy renders no container of {ref}"
        done = run_in(engine, ref, check_script(mine))
        missing = [line for line in done.stdout.splitlines() if line.startswith("MISSING")]
        assert done.returncode == 0 and done.stdout.rstrip().endswith("checked"), done.stderr
        assert not missing, "\n".join(missing)
        checked += len(mine)
    assert checked == len([c for c in containers if "/dailyrec-" in c["image"]])


def test_torch_and_the_documented_filesystems_resolve_in_both_images(images):
    engine, refs = images
    opts = {"s3": "anon=True", "gs": "token='anon'"}
    probe = "import torch, fsspec; print(torch.__version__); " + "; ".join(
        f"print(type(fsspec.filesystem({s!r}, {opts.get(s, '')})).__module__)"
        for s in ("file", *DOCUMENTED_SCHEMES)
    )
    for name, ref in refs.items():
        done = run_in(engine, ref, f"python -c {shlex.quote(probe)}")
        assert done.returncode == 0, (name, done.stderr[-2000:])
        version, *modules = done.stdout.split()
        assert version.startswith("2.13.0"), version
        assert [m.split(".")[0] for m in modules] == ["fsspec", "s3fs", "gcsfs"], modules


def test_every_stage_cli_answers_help_in_both_images(images):
    engine, refs = images
    script = "\n".join(
        f"python -m components.{stage} --help >/dev/null 2>&1 || echo FAILED {stage}"
        for stage in STAGES
    )
    for name, ref in refs.items():
        done = run_in(engine, ref, script + "\necho done")
        assert done.stdout.split() == ["done"], (name, done.stdout)


def test_each_image_carries_the_bill_of_what_it_installed(images):
    """The CycloneDX bill inside each image (images/sbom.py, from the lock) names exactly the
    Python distributions pip installed there, at their versions, and the image's label points
    at it."""
    import json
    import subprocess

    from images.sbom import SBOM_LABEL, SBOM_PATH, normalized

    engine, refs = images
    for name, ref in refs.items():
        done = run_in(engine, ref, f"cat {SBOM_PATH} && echo '\\f' && pip list --format json")
        assert done.returncode == 0, (name, done.stderr)
        bill, installed = done.stdout.split("\f")
        listed = {c["name"]: c["version"] for c in json.loads(bill)["components"]}
        have = {normalized(d["name"]): d["version"] for d in json.loads(installed)}
        have.pop("pip")  # the venv's own installer, seeded by python -m venv, not by the lock
        assert have == listed, (name, set(have.items()) ^ set(listed.items()))
        label = subprocess.run(
            [engine, "inspect", "-f", f'{{{{index .Config.Labels "{SBOM_LABEL}"}}}}', ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert label == SBOM_PATH, name
