"""Image sizes and cold build times: ``images/build.sh`` with no layer cache, timed per image,
sizes from the engine (``make bench-images``; the build's settings come from the environment,
as for ``make images``).

    python -m benchmarks.images [--results PATH] [--no-readme]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from benchmarks.measure import machine
from benchmarks.readme import ROOT, measurement_main

REGISTRY, TAG = "localhost", "bench"
BUILT = re.compile(r"^built (\S+) in (\d+)s$")


def engine() -> str:
    from pipelines.containers import engine as answering

    found = answering()
    if found is None:
        raise SystemExit("images: no container engine answers (install docker or podman)")
    return found


def measure() -> dict:
    name = engine()
    started = time.perf_counter()
    done = subprocess.run(
        [str(ROOT / "images" / "build.sh"), REGISTRY, TAG],
        env={**os.environ, "NO_CACHE": "1", "CONTAINER_ENGINE": name},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"images: the build failed:\n{done.stderr[-3000:]}")
    total = time.perf_counter() - started
    seconds = {
        m[1]: int(m[2]) for line in done.stderr.splitlines() if (m := BUILT.match(line.strip()))
    }
    base = next(
        (line.split(": ", 1)[1] for line in done.stderr.splitlines() if line.startswith("base: ")),
        "",
    )
    images = {}
    for ref in done.stdout.split():
        inspect = subprocess.run(
            [name, "image", "inspect", ref], capture_output=True, text=True, check=True
        )
        doc = json.loads(inspect.stdout)[0]
        labels = (doc.get("Config") or {}).get("Labels") or doc.get("Labels") or {}
        images[ref.split("/")[-1].split(":")[0]] = {
            "bytes": int(doc["Size"]),
            "build_seconds": seconds.get(ref),
            "base": labels.get("org.opencontainers.image.base.name"),
            "variant": labels.get("io.dailyrec.variant"),
        }
    return {
        "machine": machine(),
        "engine": name,
        "base_mode": base,
        "total_seconds": round(total, 1),
        "images": images,
    }


def readme_table(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"Measured by `make bench-images` on {m['cpus']} cores ({m['cpu_model']}), "
        f"{m['memory_gib']} GiB RAM, with {result['engine']}, no layer cache; base: "
        f"{result['base_mode']}.",
        "",
        "| image | variant | base | size (GiB) | cold build (s) |",
        "|---|---|---|---:|---:|",
    ]
    for name, image in sorted(result["images"].items()):
        lines.append(
            f"| {name} | {image['variant']} | `{image['base']}` | {image['bytes'] / 2**30:.2f} "
            f"| {image['build_seconds']} |"
        )
    lines.append("")
    lines.append(
        f"Both images in {result['total_seconds']:.0f} s, the Debian base included when it was "
        "built. The production trainer (CUDA 13 wheels) is larger; it needs a registry to build."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return measurement_main("images", __doc__, measure, readme_table, argv)


if __name__ == "__main__":
    sys.exit(main())
