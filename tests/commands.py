"""What a rendered container runs: the commands of its argv, and the object stores the docs
promise (each image must resolve their filesystems)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DOCUMENTED_SCHEMES = ("s3", "gs")
"""Object stores the docs promise for raw logs and storage (docs/stages.md, docs/cluster.md)."""


def commands_of(argv: list[str]) -> list[tuple[str, str | None]]:
    """(executable, module run with -m/--module or None) of each command ``argv`` runs, including
    those of a ``sh -c`` script (KFP's lightweight executor)."""
    if not argv:
        return []
    if (
        Path(argv[0]).name in ("sh", "bash")
        and len(argv) > 2
        and argv[1].startswith("-")
        and "c" in argv[1]
    ):
        found = [(argv[0], None)]
        script = argv[2]
        found += [(m, None) for m in re.findall(r"\$\(\s*([A-Za-z0-9_.-]+)", script)]
        for line in script.splitlines():
            line = re.sub(r"\$\([^)]*\)", "X", line)  # substitutions: found above
            try:
                words = shlex.split(line)
            except ValueError:
                continue
            words = [w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
            if words and not words[0].startswith("$"):
                found += commands_of(words)[:1] if words[0] not in ("if", "then", "fi") else []
        return found
    module = None
    for flag in ("-m", "--module"):
        if flag in argv[1:]:
            module = argv[argv.index(flag, 1) + 1]
            break
    inner = []
    wrappers = ("components.train.torchrun", "components.train.node")
    if module in wrappers and "--module" in argv:  # our torchrun wrappers
        inner = [(argv[0], argv[argv.index("--module") + 1])]
    return [(argv[0], module), *inner]
