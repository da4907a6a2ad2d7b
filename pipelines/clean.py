"""``python -m pipelines.clean runs|datasets [--root ROOT]``: delete a storage root's local runs
(with the local registry) or its datasets, under the root's lock (``make clean-runs``,
``make clean-data``).

A run that is live there holds the lock: the deletion is refused naming it, rather than pulling
the folders from under it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from components.common.cli import Exit, cli_parser, exit_for
from components.common.lock import LockBusy, storage_lock

WHAT = {"runs": "runs", "datasets": "datasets"}
"""What each target deletes under the storage root."""


def clean(root: Path, what: str) -> Path | None:
    """Delete ``root/<what>`` while holding the root's lock; the folder deleted, None when absent."""
    folder = Path(root) / WHAT[what]
    if not folder.exists() and not folder.is_symlink():
        return None
    with storage_lock(root, f"clean-{what}", stage=f"clean {what}"):
        if folder.is_symlink():  # the link, never what it leads to
            folder.unlink()
        else:
            shutil.rmtree(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m pipelines.clean",
        "Delete a storage root's local runs (with the local registry) or its datasets, under "
        "the root's lock.",
    )
    p.add_argument("what", choices=sorted(WHAT), help="what to delete")
    p.add_argument("--root", default=".", help="the storage root (default: .)")
    args = p.parse_args(argv)
    try:
        done = clean(Path(args.root), args.what)
    except LockBusy as exc:
        print(f"clean: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except OSError as exc:
        print(f"clean: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(f"deleted {done}" if done else f"nothing to delete: no {Path(args.root) / args.what}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
