"""Put an earlier model back as champion: ``python -m components.register.rollback --model-name NAME
[--to-version N] [--tracking-uri URI]``.

Without ``--to-version`` the ``previous`` version becomes ``champion`` again. The
demoted version takes the ``previous`` alias, so a second rollback undoes the
first. Serving clients that load ``models:/NAME@champion`` pick it up on reload.

A rollback is an alias move like the register stage's, with the same guards:

* it holds the storage root's lock (a local SQLite registry: ``<root>/runs/.lock``;
  ``--storage-root`` for a shared volume beside a remote registry), so it cannot
  interleave with a run's register stage;
* the version it promotes must pass the integrity check (its files' digest is the
  one recorded at registration), or it stays where it is: a champion nobody can
  load is worse than the current one;
* the move is compare-and-set: when ``@champion`` changed between reading it and
  moving it, nothing moves and the rollback says so.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

from components.common.cli import Exit, cli_parser, exit_for
from components.common.integrity import IntegrityError, verified_download
from components.common.lock import LockBusy, storage_lock
from components.common.registry import CHAMPION, PREVIOUS, alias_version
from components.common.registry_read import MODEL_NAME
from components.common.tracking import TrackingError, connect, default_tracking_uri, sqlite_path
from components.register.stage import ChampionMoved


def lock_root(tracking_uri: str, storage_root: str | None) -> Path | None:
    """The storage root whose lock guards the registry: given, or the one a local SQLite registry
    (``<root>/runs/mlflow.db``) lives in; None for a remote registry without a shared root."""
    if storage_root:
        return Path(storage_root)
    db = sqlite_path(tracking_uri)
    return db.parent.parent if db is not None and db.parent.name == "runs" else None


def rollback(
    tracking_uri: str, name: str, to_version: int | None = None, storage_root: str | None = None
) -> dict:
    """Move ``champion`` to ``to_version`` (default: ``previous``) after verifying it; returns
    {"champion", "previous"}. Raises ValueError, IntegrityError, ChampionMoved or LockBusy."""
    root = lock_root(tracking_uri, storage_root)
    guard = storage_lock(root, "rollback", stage="rollback") if root else contextlib.nullcontext()
    with guard:
        client = connect(tracking_uri)
        current = alias_version(client, name, CHAMPION)
        if to_version is None:
            previous = alias_version(client, name, PREVIOUS)
            if previous is None:
                raise ValueError(
                    f"{name} has no @{PREVIOUS} version to roll back to; pass --to-version"
                )
            to_version = int(previous.version)
        client.get_model_version(name, str(to_version))  # a clear MLflow error if it does not exist
        with tempfile.TemporaryDirectory(prefix="dailyrec-rollback-") as tmp:
            verified_download(client, name, to_version, tmp)  # IntegrityError: nothing moves
        seen = int(current.version) if current is not None else None
        now = alias_version(client, name, CHAMPION)
        if (int(now.version) if now is not None else None) != seen:
            raise ChampionMoved(
                f"{name}@champion moved from v{seen} to v{now.version if now else None} "
                f"during the rollback; nothing moved: check the registry and run it again"
            )
        if current is not None and seen != to_version:
            client.set_registered_model_alias(name, PREVIOUS, current.version)
        client.set_registered_model_alias(name, CHAMPION, str(to_version))
        client.set_model_version_tag(
            name, str(to_version), "rolled_back_from", str(seen) if seen else ""
        )
    return {"champion": to_version, "previous": seen}


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m components.register.rollback", "Put an earlier model version back as champion."
    )
    p.add_argument(
        "--model-name", default=MODEL_NAME, help="registered model whose @champion moves back"
    )
    p.add_argument(
        "--to-version",
        type=int,
        default=None,
        help="version to make champion again (default: the previous champion)",
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI, else sqlite:///runs/mlflow.db)",
    )
    p.add_argument(
        "--storage-root",
        default=None,
        help="storage root whose lock to hold (default: the local registry's root; none for a "
        "remote registry)",
    )
    args = p.parse_args(argv)
    try:
        result = rollback(
            args.tracking_uri or default_tracking_uri(),
            args.model_name,
            args.to_version,
            args.storage_root,
        )
    except (TrackingError, ValueError, IntegrityError, ChampionMoved, LockBusy) as exc:
        print(f"rollback: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except Exception as exc:  # MlflowException: unknown model or version
        print(f"rollback: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return Exit.FAILED
    print(
        f"{args.model_name}: champion = v{result['champion']}"
        + (f", previous = v{result['previous']}" if result["previous"] else "")
    )
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
