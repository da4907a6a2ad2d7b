"""Prometheus metrics: training progress (rank 0 serves ``/metrics``) and each run's outcome (pushed to a
Pushgateway by the exit handler).

Configured by environment variables only (never by arguments, so nothing lands in process lists or KFP
parameters):

* ``DAILYREC_METRICS_PORT``: rank 0 of the trainer serves its progress gauges on this port (unset: none);
* ``DAILYREC_PUSHGATEWAY``: the Pushgateway URL the run's outcome goes to (unset: not pushed). A URL
  carrying credentials is refused.

The names below are what ``manifests/monitoring/`` (alert rules, Grafana dashboard) query.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway, start_http_server

from components.common.evaluation import Decision
from components.common.progress import get_logger
from components.common.runs import STAGES, RunFolder
from components.common.tracking import check_no_credentials, redact

if TYPE_CHECKING:
    from components.common.run_summary import RunSummary

log = get_logger(__name__)

PORT_ENV = "DAILYREC_METRICS_PORT"
PUSHGATEWAY_ENV = "DAILYREC_PUSHGATEWAY"
JOB = "dailyrec"
"""The Pushgateway job of the daily runs; one group per model name (label ``model``)."""

TRAINING_METRICS = {
    "dailyrec_training_samples_per_second": "Training samples per second across all ranks (recent steps).",
    "dailyrec_training_planned_samples_per_second": "Samples per second the plan (estimate stage) expects.",
    "dailyrec_training_loss": "Mean training loss of the current epoch so far.",
    "dailyrec_training_val_auc": "Validation AUC after the latest epoch.",
    "dailyrec_training_data_wait_fraction": "Share of the latest epoch's time spent waiting for data.",
    "dailyrec_training_gpu_utilization_percent": "Mean GPU utilization over the latest epoch (NVML).",
    "dailyrec_training_epoch": "Current epoch, 1-based.",
    "dailyrec_training_progress_ratio": "Share of the run's planned steps done (0..1).",
}

RUN_METRICS = {
    "dailyrec_run_succeeded": "1 when the latest run succeeded, 0 when it failed or was cancelled.",
    "dailyrec_run_finished_timestamp_seconds": "When the latest run ended (Unix time).",
    "dailyrec_run_last_success_timestamp_seconds": "When the latest successful run ended (Unix time).",
    "dailyrec_run_stage_seconds": "Seconds each stage of the latest run took (label stage).",
    "dailyrec_run_total_seconds": "Seconds of all stages of the latest run.",
    "dailyrec_run_test_auc": "Test AUC of the latest run's candidate.",
    "dailyrec_run_champion_test_auc": "Test AUC of the champion on the same test split (when it was scored).",
    "dailyrec_run_auc_tolerance": "AUC the candidate may lose against the champion (the gate's tolerance).",
    "dailyrec_run_blessed": "1 when the latest candidate was blessed.",
    "dailyrec_run_champion_version": "Registered version holding the champion alias after the latest run.",
    "dailyrec_run_rows": "Rows of the latest run's dataset (label split).",
    "dailyrec_run_train_samples_per_second": "Measured training samples per second of the latest run.",
    "dailyrec_run_planned_samples_per_second": "Samples per second the latest run's plan expected.",
}


class TrainingMetrics:
    """Rank 0's training gauges; served on ``port`` (``$DAILYREC_METRICS_PORT``) when one is given.

    The gauges live in their own registry: several trainings in one process (tests, the tuner) never
    clash over names."""

    def __init__(self, port: int | None = None, address: str = "0.0.0.0") -> None:
        self.registry = CollectorRegistry()
        self.gauges = {
            name: Gauge(name, text, registry=self.registry)
            for name, text in TRAINING_METRICS.items()
        }
        self.server = None
        if port is not None:
            self.server, _ = start_http_server(port, addr=address, registry=self.registry)

    @classmethod
    def from_env(cls, is_main: bool) -> TrainingMetrics | None:
        """Rank 0's gauges, served when ``$DAILYREC_METRICS_PORT`` is set; other ranks get None."""
        if not is_main:
            return None
        port = os.environ.get(PORT_ENV)
        if not port:
            return cls()
        try:
            return cls(int(port))
        except (ValueError, OSError) as exc:  # a metrics port must never stop a training
            log.warning("%s=%r: training metrics not served (%s)", PORT_ENV, port, exc)
            return cls()

    def set(self, **values: float | None) -> None:
        """Set gauges by short name (``samples_per_second=…``); None leaves a gauge as it is."""
        for short, value in values.items():
            if value is not None:
                self.gauges[f"dailyrec_training_{short}"].set(value)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def run_outcome(
    summary: RunSummary, decision: Decision | None = None, now: float | None = None
) -> CollectorRegistry:
    """The run's outcome as gauges (the names in :data:`RUN_METRICS`), from its summary and, for the
    champion's AUC and the tolerance, evaluate's decision.json. A value the run does not have is NaN
    (comparisons with it are false: no alert fires on it); only the last success time is left out of a
    failed run's outcome, so that the previous one stays."""
    now = time.time() if now is None else now
    registry = CollectorRegistry()
    gauges: dict[str, Gauge] = {}

    def gauge(name: str, value: Any, labels: dict[str, str] | None = None) -> None:
        # every per-run value is pushed, NaN when this run has none: pushadd would otherwise keep an
        # earlier run's value (a champion AUC from last week next to today's candidate)
        value = math.nan if value is None else value
        if name not in gauges:
            gauges[name] = Gauge(name, RUN_METRICS[name], list(labels or {}), registry=registry)
        (gauges[name].labels(**labels) if labels else gauges[name]).set(float(value))

    succeeded = summary.succeeded
    gauge("dailyrec_run_succeeded", int(succeeded))
    gauge("dailyrec_run_finished_timestamp_seconds", now)
    if succeeded:  # pushadd keeps the previous value when this run failed
        gauge("dailyrec_run_last_success_timestamp_seconds", now)
    for stage in STAGES:
        gauge(
            "dailyrec_run_stage_seconds",
            summary.stage_seconds.get(stage),
            {"stage": stage},
        )
    gauge("dailyrec_run_total_seconds", summary.total_seconds)
    gauge("dailyrec_run_test_auc", summary.test_auc)
    blessed = summary.blessed
    gauge("dailyrec_run_blessed", None if blessed is None else int(bool(blessed)))
    gauge("dailyrec_run_champion_version", summary.champion_version)
    for split in ("train", "val", "test"):
        gauge("dailyrec_run_rows", summary.dataset_rows.get(split), {"split": split})
    throughput = (summary.plan_vs_actual or {}).get("samples_per_s") or {}
    gauge("dailyrec_run_train_samples_per_second", throughput.get("measured"))
    gauge("dailyrec_run_planned_samples_per_second", throughput.get("predicted"))
    comparison = (decision.comparison if decision else None) or {}
    gauge("dailyrec_run_champion_test_auc", comparison.get("auc_b"))
    gauge("dailyrec_run_auc_tolerance", decision.rule.get("tolerance") if decision else None)
    return registry


def push_run_outcome(
    summary: RunSummary, gateway: str | None = None, now: float | None = None
) -> bool:
    """Push the run's outcome to the Pushgateway (``gateway``, else ``$DAILYREC_PUSHGATEWAY``; neither: do
    nothing). Group: job ``dailyrec``, label ``model``. POST (pushadd): metrics this run has no value
    for (the last success time of a failed run) keep their previous value. A failed push is logged,
    never raised: monitoring must not fail the run it reports. Returns whether it pushed."""
    gateway = gateway or os.environ.get(PUSHGATEWAY_ENV)
    if not gateway:
        return False
    try:
        check_no_credentials(gateway, PUSHGATEWAY_ENV)
    except ValueError as exc:
        log.warning("%s", str(exc).split(". Pass")[0])
        return False
    folder = summary.run_folder  # no decision: the run ended before evaluate
    decision = Decision.find(RunFolder(Path(folder)).evaluate) if folder else None
    registry = run_outcome(summary, decision, now)
    try:
        pushadd_to_gateway(
            gateway,
            job=JOB,
            registry=registry,
            grouping_key={"model": summary.model_name or "dailyrec"},
            timeout=10,
        )
    except OSError as exc:  # URLError, a refused connection, an HTTP error status
        log.warning("run outcome not pushed to %s: %s", redact(gateway), exc)
        return False
    return True
