"""Put an earlier model back as champion: ``python -m components.register.rollback --model-name NAME
[--to-version N] [--tracking-uri URI]``.

Without ``--to-version`` the ``previous`` version becomes ``champion`` again. The
demoted version takes the ``previous`` alias, so a second rollback undoes the
first. Serving clients that load ``models:/NAME@champion`` pick it up on reload.
"""

from __future__ import annotations

import argparse
import sys

from components.common.cli import HelpFormatter
from components.common.tracking import TrackingError, connect
from components.register.registry import CHAMPION, PREVIOUS, alias_version
from components.register.stage import default_tracking_uri


def rollback(tracking_uri: str, name: str, to_version: int | None = None) -> dict:
    """Move ``champion`` to ``to_version`` (default: ``previous``); returns {"champion", "previous"}."""
    client = connect(tracking_uri)
    current = alias_version(client, name, CHAMPION)
    if to_version is None:
        previous = alias_version(client, name, PREVIOUS)
        if previous is None:
            raise ValueError(f"{name} has no @{PREVIOUS} version to roll back to; pass --to-version")
        to_version = int(previous.version)
    client.get_model_version(name, str(to_version))  # a clear MLflow error if it does not exist
    if current is not None and int(current.version) != to_version:
        client.set_registered_model_alias(name, PREVIOUS, current.version)
    client.set_registered_model_alias(name, CHAMPION, str(to_version))
    client.set_model_version_tag(name, str(to_version), "rolled_back_from",
                                 str(current.version) if current else "")
    return {"champion": to_version, "previous": int(current.version) if current else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m components.register.rollback", formatter_class=HelpFormatter,
                                description="Put an earlier model version back as champion.")
    p.add_argument("--model-name", default="dailyrec", help="registered model whose @champion moves back")
    p.add_argument("--to-version", type=int, default=None,
                   help="version to make champion again (default: the previous champion)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI, else sqlite:///runs/mlflow.db)")
    args = p.parse_args(argv)
    try:
        result = rollback(args.tracking_uri or default_tracking_uri(), args.model_name, args.to_version)
    except (TrackingError, ValueError) as exc:
        print(f"rollback: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # MlflowException: unknown model or version
        print(f"rollback: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"{args.model_name}: champion = v{result['champion']}"
          + (f", previous = v{result['previous']}" if result["previous"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
