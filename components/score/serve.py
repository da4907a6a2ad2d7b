"""Serve a registered model over HTTP with MLflow's scoring app, after checking its files.

``python -m components.score.serve --model models:/dailyrec@champion [--port 5001]``
downloads the version, refuses it unless its files match the digest recorded
at registration (:mod:`components.common.integrity`), then serves MLflow's
scoring app for it on 127.0.0.1 under uvicorn, in this process, with a strict
``/invocations`` (:mod:`components.score.app`: bodies bounded, values typed as
sent, unknown fields refused). POST raw-id requests in any of MLflow's formats
(:mod:`components.score.features` lists the columns)::

    curl -s 127.0.0.1:5001/invocations -H 'Content-Type: application/json' \\
      -d '{"dataframe_records": [{"user_id": 42, "item_id": "sku-7", "timestamp": 1767258000}]}'

A bad request is answered with HTTP 400 (413: too large) and a one-line reason.
SIGTERM and Ctrl-C stop the server and remove the verified copy.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile

from components.common.cli import Exit, cli_parser, exit_for, signal_exit
from components.common.registry_read import CHAMPION_URI

HOST = "127.0.0.1"


class Stopped(Exception):
    """A signal stopped the server (after uvicorn's graceful shutdown)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum


def _stop(signum: int, frame) -> None:
    raise Stopped(signum)


def run_server(model_dir: str, port: int, workers: int, timeout: int) -> None:
    """Serve ``model_dir`` until a signal stops uvicorn (then :class:`Stopped`)."""
    import uvicorn

    from components.score.app import MODEL_ENV, TIMEOUT_ENV

    os.environ.update({MODEL_ENV: model_dir, TIMEOUT_ENV: str(timeout)})
    # uvicorn shuts down gracefully, restores this handler and raises the signal again
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        uvicorn.run(
            "components.score.app:app_from_env",
            factory=True,
            host=HOST,
            port=port,
            workers=workers,
            timeout_graceful_shutdown=timeout,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m components.score.serve",
        __doc__.splitlines()[0],
        "A server that cannot start (its port taken) exits 1.",
    )
    p.add_argument(
        "--model",
        default=CHAMPION_URI,
        help="models:/NAME@ALIAS or models:/NAME/VERSION",
    )
    p.add_argument("--port", type=int, default=5001, help="port on 127.0.0.1")
    p.add_argument("--workers", type=int, default=1, help="scoring server worker processes")
    p.add_argument(
        "--timeout",
        type=int,
        default=60,
        help="seconds a request may take: past it the answer is 504 and its scoring stops",
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow registry; default $MLFLOW_TRACKING_URI, else sqlite under ./runs",
    )
    args = p.parse_args(argv)
    if not 0 < args.port < 65536 or args.workers < 1 or not 1 <= args.timeout <= 3600:
        print(
            "serve: error: --port must be in 1..65535, --workers >= 1, --timeout in 1..3600",
            file=sys.stderr,
        )
        return Exit.USAGE
    from components.common.integrity import IntegrityError, open_model, verified_download
    from components.common.tracking import TrackingError, default_tracking_uri, redact

    uri = args.tracking_uri or default_tracking_uri()
    with tempfile.TemporaryDirectory(prefix="dailyrec-serve-") as tmp:
        try:
            client, name, version = open_model(uri, args.model)
            local = verified_download(client, name, version, tmp)
        except (IntegrityError, TrackingError, ValueError, OSError) as exc:
            print(f"serve: error: {exc}", file=sys.stderr)
            return exit_for(exc)
        except Exception as exc:  # MlflowException: unknown model, version or alias
            print(f"serve: error: {type(exc).__name__}: {redact(str(exc))}", file=sys.stderr)
            return Exit.FAILED
        print(
            f"serving models:/{name}/{version} (verified) on http://{HOST}:{args.port}/invocations",
            flush=True,
        )
        os.environ.update({"MLFLOW_TRACKING_URI": uri, "MLFLOW_DISABLE_TELEMETRY": "true"})
        try:
            run_server(str(local), args.port, args.workers, args.timeout)
        except Stopped as stop:
            return signal_exit(stop.signum)
        except KeyboardInterrupt:
            return signal_exit(signal.SIGINT)
        except SystemExit:  # uvicorn's own, after logging why it could not start
            print(f"serve: error: no server started on {HOST}:{args.port}", file=sys.stderr)
            return Exit.FAILED
        return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
