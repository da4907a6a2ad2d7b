"""The scoring server's app: MLflow's own for a verified model, with a strict ``/invocations``.

:func:`create_app` loads a verified model folder with ``mlflow.pyfunc.load_model``
and builds MLflow's scoring app from it (``/ping``, ``/health``, ``/version``, and
its request timeout answering 504), then puts in place of MLflow's
``/invocations`` one that bounds and types the work:

* a body over :data:`~components.score.protocol.MAX_BYTES` is answered 413
  before it is read whole; rows and events are bounded by
  :mod:`components.score.features` (400);
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


def _error(status: int, code: str, message: str) -> Response:
    """An answer other than 200: ``{"error_code", "message"}`` with the message on one line."""
    body = json.dumps({"error_code": code, "message": " ".join(message.split())})
    return Response(content=body, status_code=status, media_type=JSON)


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

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        deadline = time.monotonic() + timeout
        try:
            frame, params = parse_body(
                await _read_body(request), request.headers.get("content-type")
            )
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
