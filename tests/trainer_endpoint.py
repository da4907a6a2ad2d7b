"""The endpoint Kubeflow Trainer's controller offers trainer pods for their progress (its URL, CA
file and rotating token file), served here over real HTTPS for the tests that post to it."""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from components.train import trainjob_status as ts


@contextlib.contextmanager
def trainer_endpoint(
    folder: Path, seen_as: str | None = None
) -> Iterator[tuple[dict[str, str], Path, list]]:
    """(the env a trainer pod gets, the token file, the (Authorization, body) pairs received).

    The CA and token live in ``folder``; ``seen_as`` is that folder's path where the trainer runs
    (a container's mount), default the same path."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    received: list = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.headers["Authorization"], body))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = folder / "token"
    token.write_text("first-token\n")
    for path in (cert, token):
        path.chmod(0o644)  # the trainer image's user reads them, as a projected volume allows
    where = seen_as or str(folder)
    env = {
        ts.URL_ENV: f"https://127.0.0.1:{server.server_address[1]}/trainjob/status",
        ts.CA_ENV: f"{where}/tls.crt",
        ts.TOKEN_ENV: f"{where}/token",
    }
    try:
        yield env, token, received
    finally:
        server.shutdown()
        server.server_close()
