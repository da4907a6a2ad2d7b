"""Each image's bill of materials (images/sbom.py): CycloneDX 1.6 by CycloneDX's own schema,
made from the very lock the image installs, and carried by the image (make test-images checks
it against what pip installed there)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from images.lock import torch_pin
from images.sbom import SBOM_LABEL, SBOM_PATH, LockError, bom, locked, main, normalized

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ("runtime", "trainer")


def _bom(image: str) -> dict:
    return bom(image, (ROOT / "images" / image / "requirements.lock").read_text(), "0.1.0")


@pytest.mark.parametrize("image", IMAGES)
def test_the_bill_is_valid_cyclonedx_by_its_own_schema(image):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(_bom(image)))
    assert error is None, error


@pytest.mark.parametrize("image", IMAGES)
def test_every_locked_distribution_is_in_the_bill_with_every_hash(image):
    text = (ROOT / "images" / image / "requirements.lock").read_text()
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:==| @ )", text, re.MULTILINE)
    hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", text)
    document = _bom(image)
    listed = {c["name"]: c for c in document["components"]}
    assert {normalized(n) for n in names} | {"dailyrec"} == set(listed)
    assert sorted(hashes) == sorted(
        h["content"] for c in listed.values() for h in c.get("hashes", [])
    )
    assert listed["torch"]["version"].startswith(torch_pin())  # pyproject's pin, as locked
    for name, component in listed.items():
        assert component["purl"] == f"pkg:pypi/{name}@{component['version']}"
    # every component hangs off the image
    (edges,) = document["dependencies"]
    assert edges["ref"] == f"dailyrec-{image}" == document["metadata"]["component"]["name"]
    assert sorted(edges["dependsOn"]) == sorted(c["bom-ref"] for c in document["components"])


def test_the_same_lock_gives_the_same_bill_and_another_lock_another_serial():
    text = (ROOT / "images" / "runtime" / "requirements.lock").read_text()
    assert json.dumps(bom("runtime", text, "1")) == json.dumps(bom("runtime", text, "1"))
    moved = text.replace("==", "==9", 1)
    assert bom("runtime", moved, "1")["serialNumber"] != bom("runtime", text, "1")["serialNumber"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("numpy==2.0\n", "requirements.lock: no --hash for numpy: not a hash lock"),
        ("numpy>=2.0 \\\n    --hash=sha256:" + "a" * 64 + "\n", "requirements.lock:1: not"),
        ("    --hash=sha256:" + "a" * 64 + "\n", "requirements.lock:1: a hash before"),
    ],
)
def test_a_lock_it_cannot_account_for_is_refused_by_line(text, error):
    with pytest.raises(LockError, match=re.escape(error)):
        locked(text)


@pytest.mark.parametrize("image", IMAGES)
def test_each_image_builds_and_carries_its_own_bill(image):
    """The Dockerfile makes the bill from the lock it installs and copies it to SBOM_PATH,
    labelled, in the final image."""
    dockerfile = (ROOT / "images" / image / "Dockerfile").read_text()
    made = re.search(r"^RUN python \S*sbom\.py (\w+) (\S+) requirements\.lock", dockerfile, re.M)
    assert made and made[1] == image
    assert f"COPY --from=builder {made[2]} {SBOM_PATH}\n" in dockerfile
    assert f'{SBOM_LABEL}="{SBOM_PATH}"' in dockerfile
    # the bill is made after the lock is installed, from the same file
    assert dockerfile.index("--require-hashes -r requirements.lock") < made.start()


def test_the_cli_writes_the_bill_and_names_what_is_wrong(tmp_path, capsys):
    out = tmp_path / "sbom" / "runtime.cdx.json"
    assert main(["runtime", str(out)]) == 0
    assert json.loads(out.read_text())["metadata"]["component"]["name"] == "dailyrec-runtime"
    assert not list(out.parent.glob("*.partial"))
    missing = tmp_path / "nope.lock"
    assert main(["runtime", str(out), str(missing), str(ROOT / "pyproject.toml")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sbom: error: FileNotFoundError") and "nope.lock" in err
    assert main(["gpu", str(out)]) == 2
