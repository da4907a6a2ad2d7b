"""Serve a registered model over HTTP with ``mlflow models serve``, after checking its files.

``python -m components.score.serve --model models:/dailyrec@champion [--port 5001]``
downloads the version, refuses it unless its files match the digest recorded
at registration (:mod:`components.register.integrity`), then runs MLflow's
scoring server on 127.0.0.1 in this Python environment (``--env-manager
local``). POST raw-id requests to ``/invocations``
(:mod:`components.score.features` lists the columns)::

    curl -s 127.0.0.1:5001/invocations -H 'Content-Type: application/json' \\
      -d '{"dataframe_records": [{"user_id": 42, "item_id": "sku-7", "timestamp": 1767258000}]}'

A bad request is answered with HTTP 400 and a one-line reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile

from components.common.cli import Exit, cli_parser, exit_for, signal_exit

HOST = "127.0.0.1"


def serve_command(model_dir: str, port: int, workers: int) -> list[str]:
    """The ``mlflow models serve`` command line for a verified local model folder."""
    mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or "mlflow"
    return [
        mlflow,
        "models",
        "serve",
        "-m",
        model_dir,
        "--env-manager",
        "local",
        "-h",
        HOST,
        "-p",
        str(port),
        "-w",
        str(workers),
    ]


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m components.score.serve",
        __doc__.splitlines()[0],
        "Once serving, the exit status is the scoring server's own.",
    )
    p.add_argument(
        "--model",
        default="models:/dailyrec@champion",
        help="models:/NAME@ALIAS or models:/NAME/VERSION",
    )
    p.add_argument("--port", type=int, default=5001, help="port on 127.0.0.1")
    p.add_argument("--workers", type=int, default=1, help="scoring server worker processes")
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow registry; default $MLFLOW_TRACKING_URI, else sqlite under ./runs",
    )
    args = p.parse_args(argv)
    if not 0 < args.port < 65536 or args.workers < 1:
        print("serve: error: --port must be in 1..65535 and --workers >= 1", file=sys.stderr)
        return Exit.USAGE
    from components.common.tracking import TrackingError, connect, redact
    from components.register.integrity import IntegrityError, resolve_model_uri, verified_download
    from components.register.stage import default_tracking_uri

    uri = args.tracking_uri or default_tracking_uri()
    with tempfile.TemporaryDirectory(prefix="dailyrec-serve-") as tmp:
        try:
            client = connect(uri)
            name, version = resolve_model_uri(client, args.model)
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
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_DISABLE_TELEMETRY": "true"}
        try:
            return subprocess.call(serve_command(str(local), args.port, args.workers), env=env)
        except KeyboardInterrupt:
            return signal_exit(signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main())
