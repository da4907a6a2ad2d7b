"""Training progress in the TrainJob's own status: what ``kubectl get trainjob`` and the UI show.

Kubeflow Trainer (2.2+, with the ``TrainJobStatus`` feature gate) injects into each trainer pod
the address of an endpoint of its controller (``KUBEFLOW_TRAINER_SERVER_URL``), its CA
(``..._CA_CERT``: a file) and a projected token (``..._TOKEN``: a file, re-read each time: it
rotates); a POST of ``{"trainerStatus": {...}}`` becomes ``TrainJob.status.trainerStatus``
(kubeflow/trainer's user guide on TrainJob progress, the CRD's ``TrainerStatus``). Rank 0
posts the share of the planned steps done, the time left -- the plan's estimate until the first
steps are measured, then the measured pace of this run -- and the latest metrics, at most every
:data:`EVERY_S` seconds, from a thread of its own: a slow or absent endpoint never holds a step,
and a failure is logged once, never raised.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from components.common.progress import get_logger

log = get_logger(__name__)

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
EVERY_S = 5.0
"""Fewest seconds between two posts (the controller's guidance: at most one each 5 s)."""
TIMEOUT_S = 5.0
MAX_METRICS = 256
"""The CRD's bound on ``metrics`` (names and values at most 64 characters each)."""


def trainer_status(
    progress: float, remaining_s: float | None, metrics: dict[str, float | int | str], now=None
) -> dict[str, Any]:
    """The ``trainerStatus`` object: ``progress`` (0..1) as a whole percentage, the seconds left,
    ``metrics`` as the CRD's name/value strings, and the time of the observation."""
    status: dict[str, Any] = {
        "progressPercentage": max(0, min(100, int(math.floor(100 * progress)))),
        "metrics": [
            {"name": str(name)[:64], "value": _text(value)}
            for name, value in list(metrics.items())[:MAX_METRICS]
            if _text(value)
        ],
        "lastUpdatedTime": (now or dt.datetime.now(dt.UTC))
        .replace(microsecond=0)
        .strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if remaining_s is not None and math.isfinite(remaining_s):
        status["estimatedRemainingSeconds"] = max(0, min(2**31 - 1, int(round(remaining_s))))
    return status


def _text(value: float | int | str) -> str:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.6g}"
    return str(value)[:64]


class TrainJobStatus:
    """Rank 0's reporter; inert (every call returns at once) outside a TrainJob that offers the
    endpoint."""

    def __init__(
        self,
        environ: dict | None = None,
        post: Callable[[dict], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        env = os.environ if environ is None else environ
        self.url, self.ca, self.token = (env.get(k, "") for k in (URL_ENV, CA_ENV, TOKEN_ENV))
        self.enabled = bool(self.url and self.ca and self.token) or post is not None
        self.post = post or self._post
        self.clock = clock
        self.sent_at = -math.inf
        self.metrics: dict[str, float | int | str] = {}
        self.failed = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def update(
        self, progress: float, remaining_s: float | None, force: bool = False, **metrics: Any
    ) -> None:
        """The latest progress (0..1), seconds left and metrics (kept: a later update without a
        metric keeps its last value); posted when :data:`EVERY_S` has passed (or ``force``)."""
        if not self.enabled:
            return
        self.metrics.update({k: v for k, v in metrics.items() if v is not None})
        now = self.clock()
        if not force and now - self.sent_at < EVERY_S:
            return
        busy = self._thread is not None and self._thread.is_alive()
        if busy and not force:
            return  # the previous post is still out: this one would only queue behind it
        self.sent_at = now
        body = {"trainerStatus": trainer_status(progress, remaining_s, dict(self.metrics))}
        if force:
            if busy:
                self._thread.join(TIMEOUT_S)
            self._send(body)
            return
        self._thread = threading.Thread(target=self._send, args=(body,), daemon=True)
        self._thread.start()

    def _send(self, body: dict) -> None:
        try:
            self.post(body)
        except Exception as exc:  # reporting must never stop a training
            with self._lock:
                if not self.failed:
                    log.warning("TrainJob status not updated (%s: %s)", type(exc).__name__, exc)
                self.failed = True

    def _post(self, body: dict) -> None:
        with open(self.token) as f:  # re-read each time: the projected token rotates
            token = f.read().strip()
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        context = ssl.create_default_context(cafile=self.ca)
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as answer:
            answer.read()
