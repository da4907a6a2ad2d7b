"""The serving benchmark's open-loop load generator counts what a real HTTP server answers: 200s,
503s, and requests left unanswered (errors), with their latencies."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks import serving


class _Handler(BaseHTTPRequestHandler):
    status = 200
    delay = 0.0

    def do_GET(self):  # /ping
        self._answer(200)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay)
        self._answer(self.status)

    def _answer(self, status):
        try:
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        except BrokenPipeError:  # the client gave up waiting: what the test wants
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    def start(status: int, delay: float = 0.0) -> int:
        handler = type("Handler", (_Handler,), {"status": status, "delay": delay})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return httpd.server_address[1]

    started = []
    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def test_answers_are_counted_by_status(server):
    ok = serving.overload(server(200), [b"{}"], rate=40, seconds=1)
    assert ok["requests"] == 40 and ok["ok"] == 1.0 and ok["errors"] == 0.0
    assert ok["p99_ms"] is not None and ok["pings_failed"] == 0 and ok["ping_p99_ms"] is not None
    shed = serving.overload(server(503), [b"{}"], rate=40, seconds=1)
    assert shed["shed_503"] == 1.0 and shed["ok"] == 0.0 and shed["errors"] == 0.0
    assert shed["ok_p99_ms"] is None and shed["shed_p99_ms"] is not None
    failed = serving.overload(server(500), [b"{}"], rate=20, seconds=1)
    assert failed["errors"] == 1.0


def test_an_unanswered_request_is_an_error(server, monkeypatch):
    monkeypatch.setattr(serving, "CLIENT_TIMEOUT", 0.2)
    slow = serving.overload(server(200, delay=1.0), [b"{}"], rate=10, seconds=0.5)
    assert slow["errors"] == 1.0 and slow["p99_ms"] is None
