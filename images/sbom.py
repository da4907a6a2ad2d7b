"""A CycloneDX 1.6 software bill of materials for each image, made offline from its hash lock.

``python images/sbom.py runtime OUT`` writes the bill of ``images/runtime/requirements.lock``:
every Python distribution the image installs, by name, version, package URL and the SHA-256 of
each file the lock accepts, plus dailyrec itself. The Dockerfiles run it in the builder stage, so
the image carries its own bill at :data:`SBOM_PATH` (labelled ``org.dailyrec.sbom``); ``make
test-images`` compares it with what pip installed there. The operating system's packages are the
base image's and are not in it: a scanner reads those from the image's dpkg database.

Deterministic: the same lock gives the same bytes (the serial number derives from the lock).
Only the standard library: it runs with the base image's python before anything is installed.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import uuid
from pathlib import Path
from urllib.parse import unquote

SBOM_PATH = "/usr/share/dailyrec/sbom.cdx.json"
"""Where each image carries its bill of materials."""
SBOM_LABEL = "org.dailyrec.sbom"
"""The image label naming :data:`SBOM_PATH`."""
SPEC_VERSION = "1.6"
_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)"
    r"(?:==(?P<version>[^\s;\\]+)| @ (?P<url>\S+))"
)
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


class LockError(ValueError):
    """A lock line this bill cannot account for (the message names the line)."""


def normalized(name: str) -> str:
    """PEP 503's normal form of a distribution name (what purls and pip compare)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(text: str, source: str = "requirements.lock") -> list[dict]:
    """Each locked distribution: name, version, hashes and (for a direct URL) its URL."""
    entries: list[dict] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith((" ", "\t")):  # a continuation: more hashes of the entry above
            if not entries:
                raise LockError(f"{source}:{number}: a hash before any requirement")
            entries[-1]["hashes"] += _HASH.findall(line)
            continue
        match = _REQUIREMENT.match(line)
        if match is None:
            raise LockError(f"{source}:{number}: not 'name==version' or 'name @ url': {line!r}")
        version, url = match["version"], match["url"]
        if url:  # a wheel's URL: its version is in the file name (name-version-tags.whl)
            version = unquote(url.rsplit("/", 1)[-1]).split("-")[1]
        entries.append(
            {"name": match["name"], "version": version, "url": url, "hashes": _HASH.findall(line)}
        )
    unhashed = [e["name"] for e in entries if not e["hashes"]]
    if unhashed:
        raise LockError(f"{source}: no --hash for {', '.join(unhashed)}: not a hash lock")
    return entries


def _component(entry: dict) -> dict:
    purl = f"pkg:pypi/{normalized(entry['name'])}@{entry['version']}"
    component = {
        "type": "library",
        "bom-ref": purl,
        "name": normalized(entry["name"]),
        "version": entry["version"],
        "purl": purl,
        "hashes": [{"alg": "SHA-256", "content": h} for h in sorted(set(entry["hashes"]))],
    }
    if entry["url"]:
        component["externalReferences"] = [{"type": "distribution", "url": entry["url"]}]
    return component


def bom(image: str, lock_text: str, version: str) -> dict:
    """The CycloneDX document of image ``image`` (runtime | trainer) from its lock's text."""
    components = sorted(
        (_component(e) for e in locked(lock_text, f"images/{image}/requirements.lock")),
        key=lambda c: c["bom-ref"],
    )
    app = f"pkg:pypi/dailyrec@{version}"
    digest = hashlib.sha256(f"{image}\0{version}\0{lock_text}".encode()).hexdigest()
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.UUID(digest[:32])}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "dailyrec images/sbom.py"}]},
            "component": {
                "type": "container",
                "bom-ref": f"dailyrec-{image}",
                "name": f"dailyrec-{image}",
                "version": version,
            },
        },
        "components": [
            {
                "type": "application",
                "bom-ref": app,
                "name": "dailyrec",
                "version": version,
                "purl": app,
            },
            *components,
        ],
        "dependencies": [
            {"ref": f"dailyrec-{image}", "dependsOn": [app, *(c["bom-ref"] for c in components)]}
        ],
    }


def project_version(pyproject: Path) -> str:
    """``[project].version`` (tomllib where there is one; bookworm's python 3.11 has it)."""
    import tomllib

    return tomllib.loads(pyproject.read_text())["project"]["version"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 4) or args[0] not in ("runtime", "trainer"):
        print(
            "usage: python images/sbom.py runtime|trainer OUT.cdx.json [LOCK PYPROJECT]",
            file=sys.stderr,
        )
        return 2
    image, out = args[:2]
    root = Path(__file__).resolve().parents[1]
    lock, pyproject = (
        map(Path, args[2:])
        if len(args) == 4
        else (root / "images" / image / "requirements.lock", root / "pyproject.toml")
    )
    try:
        document = bom(image, lock.read_text(), project_version(pyproject))
    except (OSError, LockError, KeyError) as exc:
        print(f"sbom: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    partial.replace(target)
    print(f"sbom: {target}: {len(document['components'])} components of dailyrec-{image}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
