"""The scoring server's app: MLflow's own for a verified model, with a strict ``/invocations``.

:func:`create_app` loads a verified model folder with ``mlflow.pyfunc.load_model``
and builds MLflow's scoring app from it (``/ping``, ``/health``, ``/version``, and
its request timeout answering 504), then puts in place of MLflow's
``/invocations`` one that bounds and types the work:

* a body over :data:`~components.score.protocol.MAX_BYTES` is answered 413
  before it is read whole; a Parquet body by what its footer says it holds before it is
  decoded; rows and events are bounded by :mod:`components.score.features` (400);
* work is admitted in bounds: :data:`SCORING_AT_ONCE` requests parsed and scored at once in
  worker threads (the event loop, and /ping, stay free), :data:`WAITING_AT_MOST` waiting for a
  slot; past that a request is answered 503 with Retry-After at once;
* the body is read by :mod:`components.score.protocol`: every value as the
  client sent it, and unknown fields, columns and params refused (MLflow's
  parser drops unknown columns and params, and turns an int64 id beside a null
  into a float);
* scoring stops between batches once the request timeout has passed, so no
  work outlives the 504 that answered it;
* every answer other than 200 is ``{"error_code", "message"}`` with one line:
  no stack trace, no server path (an unexpected failure is logged here and
  answered 500 with a line saying so).

Run by :mod:`components.score.serve` (``make serve``) under uvicorn. The model's
scoring code is this installation's ``components`` (already imported here), not
the copy the version carries for loading elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

from fastapi import Request  # at module level: FastAPI resolves the route's annotations here
from fastapi.responses import Response

from components.score.protocol import (
    JSON,
    MAX_BYTES,
    BadRequest,
    Overdue,
    ProtocolError,
    parse_body,
    too_large,
)

MODEL_ENV = "DAILYREC_SERVE_MODEL"
"""The verified model folder :func:`app_from_env` serves (set by ``components.score.serve``)."""
TIMEOUT_ENV = "MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT"
"""MLflow's request timeout (seconds): its app answers 504 past it, and scoring stops."""
DEFAULT_TIMEOUT = 60

log = logging.getLogger("dailyrec.serve")


SCORING_AT_ONCE = max(2, os.cpu_count() or 2)
"""Requests parsed and scored at once (each in a worker thread, off the event loop)."""
WAITING_AT_MOST = 8 * SCORING_AT_ONCE
"""Requests held for a free slot; one more is answered 503 at once (Retry-After), not left to
time out, and /ping keeps answering."""


def _error(status: int, code: str, message: str, headers: dict | None = None) -> Response:
    """An answer other than 200: ``{"error_code", "message"}`` with the message on one line."""
    body = json.dumps({"error_code": code, "message": " ".join(message.split())})
    return Response(content=body, status_code=status, media_type=JSON, headers=headers)


def _busy(why: str) -> Response:
    return _error(503, "TEMPORARILY_UNAVAILABLE", why, {"Retry-After": "1"})


class Admission:
    """Bounded work: :data:`SCORING_AT_ONCE` requests in hand, :data:`WAITING_AT_MOST` waiting."""

    def __init__(self, at_once: int = SCORING_AT_ONCE, waiting: int = WAITING_AT_MOST) -> None:
        self.slots, self.limit, self.held = asyncio.Semaphore(at_once), at_once + waiting, 0

    def full(self) -> bool:
        return self.held >= self.limit


async def _read_body(request: Request) -> bytes:
    """The request's body, refused (413) once it passes MAX_BYTES: by its declared length
    before reading, else as it streams in."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BYTES:
        raise ProtocolError(too_large(int(declared)), 413)
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > MAX_BYTES:
            raise ProtocolError(too_large(None), 413)
        parts.append(part)
    return b"".join(parts)


def create_app(model_dir: str, timeout: int = DEFAULT_TIMEOUT):
    """MLflow's scoring app for ``model_dir`` with the strict ``/invocations`` (module docstring)."""
    import mlflow.pyfunc
    from mlflow.pyfunc import scoring_server

    os.environ[TIMEOUT_ENV] = str(timeout)  # MLflow's app reads its timeout when it is built
    pyfunc = mlflow.pyfunc.load_model(model_dir)
    model = pyfunc.unwrap_python_model()
    app = scoring_server.init(pyfunc)
    app.router.routes[:] = [
        r for r in app.router.routes if getattr(r, "path", "") != "/invocations"
    ]

    admission = Admission()

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        if admission.full():
            return _busy(f"the server holds {admission.held} requests already; retry shortly")
        admission.held += 1
        try:
            return await _invocation(request, time.monotonic() + timeout)
        finally:
            admission.held -= 1

    async def _invocation(request: Request, deadline: float) -> Response:
        try:
            body = await _read_body(request)
            await asyncio.wait_for(admission.slots.acquire(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return _busy(f"no scoring slot was free within {timeout} s; retry shortly")
        except ProtocolError as exc:
            return _error(exc.status, "REQUEST_LIMIT_EXCEEDED", str(exc))
        try:
            return await _scored(body, request.headers.get("content-type"), deadline)
        finally:
            admission.slots.release()

    async def _scored(body: bytes, content_type: str | None, deadline: float) -> Response:
        try:  # parsing too is work: off the event loop, so /ping answers meanwhile
            frame, params = await asyncio.to_thread(parse_body, body, content_type)
            scores = await asyncio.to_thread(model.score, frame, params["batch_size"], deadline)
        except ProtocolError as exc:
            code = {413: "REQUEST_LIMIT_EXCEEDED", 415: "INVALID_PARAMETER_VALUE"}
            return _error(exc.status, code.get(exc.status, "BAD_REQUEST"), str(exc))
        except BadRequest as exc:
            return _error(400, "BAD_REQUEST", exc.message)
        except Overdue:
            return _error(504, "DEADLINE_EXCEEDED", f"scoring took longer than {timeout} s")
        except Exception:
            log.exception("scoring failed")
            return _error(
                500, "INTERNAL_ERROR", "the model failed on this request (see the server log)"
            )
        return Response(
            content=json.dumps({"predictions": scores.tolist()}), status_code=200, media_type=JSON
        )

    return app


def app_from_env():
    """The app of the folder in ``$DAILYREC_SERVE_MODEL`` (uvicorn's factory, one per worker)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return create_app(os.environ[MODEL_ENV], int(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT)))
