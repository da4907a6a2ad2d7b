"""A real ``mlflow server`` on 127.0.0.1 for the reliability checks, started and stopped whole."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.reliability.waiting import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(
    store: str, artifacts: Path, extra: list[str], env: dict[str, str], log, timeout: float
) -> Iterator[tuple[str, subprocess.Popen]]:
    """(its URI, its process) for a server over backend store ``store``; ``extra`` arguments
    (``--app-name basic-auth``...), killed with its process group at the end."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "mlflow", "server", *extra,
            "--host", "127.0.0.1", "--port", str(port), "--backend-store-uri", store,
            "--workers", "1", "--artifacts-destination", artifacts.as_uri(),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **env},
        start_new_session=True,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return urllib.request.urlopen(f"{uri}/health", timeout=1).status == 200
        except OSError:
            return False

    try:
        wait_for(healthy, timeout, "mlflow server start", poll=0.3)
        yield uri, proc
    finally:
        with contextlib.suppress(ProcessLookupError):  # a test may have killed it already
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
