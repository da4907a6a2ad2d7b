"""Pipeline parameters checked before the first task runs: one line naming the parameter and why.

``check_parameters(params)`` knows every parameter of the dailyrec pipelines by
name (the daily and the tune pipeline share most); a value that a stage would
only refuse minutes later (a run date that is no date, a run id that names a
folder outside the storage root, a tracking URI that carries a password) is
refused here. ``make run`` calls it before anything is written, the cluster
pipeline in its first task, ``make trigger`` before submitting.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable
from typing import Any

from components.common.paths import PathError, safe_name
from components.common.runs import DASHBOARD, LATEST, MONITOR, SCREENSHOTS
from components.common.tracking import (
    CredentialError,
    carries_credentials,
    check_no_credentials,
    redact,
)


class ParameterError(ValueError):
    """A pipeline parameter that cannot work; the message names it."""


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
LAUNCHERS = ("local", "trainjob")
EARLIEST_DATE = dt.date(1970, 1, 1)
"""Raw timestamps are epoch seconds: no window reaches before this day."""
RESERVED_RUN_IDS = (LATEST, "artifacts", MONITOR, DASHBOARD, SCREENSHOTS)
"""Names ``runs/`` holds besides run folders: the latest summary, the SQLite registry's artifacts
(and its database, ``mlflow.db*``: :func:`components.common.tracking.sqlite_uri`), the folders
of make monitor, dashboard and screenshots."""


def _date(value: str) -> None:
    if value == "":
        return
    if not _DATE.fullmatch(value):
        raise ValueError("must be a date YYYY-MM-DD (or empty for the latest day present)")
    try:
        day = dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"is not a calendar date ({exc})") from None
    tomorrow = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
    if not EARLIEST_DATE <= day <= tomorrow:  # no logs are stamped outside these days
        raise ValueError(f"must be between {EARLIEST_DATE} and {tomorrow} (tomorrow, UTC)")


def _run_id(value: str) -> None:
    if value:
        try:
            safe_name(value, "run id")
        except PathError:
            raise ValueError(
                "must be 1-128 characters of letters, digits, '.', '_', '-' (it names the run's "
                "folder under storage_root/runs; '/' and '..' would leave it)"
            ) from None
        if value in RESERVED_RUN_IDS or value.startswith("mlflow.db"):
            raise ValueError(
                f"names what storage_root/runs keeps besides run folders "
                f"({', '.join(RESERVED_RUN_IDS)}, mlflow.db); choose another"
            )


def _within(
    low: float, high: float, high_open: bool = False, low_open: bool = False
) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not (
            isinstance(value, int | float)
            and math.isfinite(value)
            and (low < value if low_open else low <= value)
            and (value < high if high_open else value <= high)
        ):
            raise ValueError(
                f"must be in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
            )

    return check


def _one_of(*choices: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")

    return check


def _uri(value: str) -> None:
    try:
        check_no_credentials(value, "")
    except CredentialError as exc:  # the redacted value is named once, by check_parameters
        raise ValueError("carries " + str(exc).split(" carries ", 1)[1]) from None


def _tracking_uri(value: str) -> None:
    _uri(value)
    if value and not re.match(r"(https?|sqlite|databricks|file)://", value):
        raise ValueError(
            "must be an http(s)://, sqlite:/// or databricks:// URI (or empty: no registry)"
        )


def _model_name(value: str) -> None:
    if not _MODEL_NAME.fullmatch(value):
        raise ValueError("must be 1-128 characters of letters, digits, '.', '_', '-'")


def _model_config(value: str) -> None:
    from components.train.model import model_config

    model_config(value)


def _hardware(value: str) -> None:
    from components.estimate.hardware import load_profile

    try:
        load_profile(value)
    except Exception as exc:  # HardwareError: unknown name, unreadable file
        raise ValueError(str(exc)) from None


_SECRET_KEY = re.compile(
    r"(?i)password|passwd|secret|token|credential|access_key|private_key|api_?key|"
    r"(?:^|[_.-])(?:pass|pwd|auth)(?:$|[_.-])"
)


def _secret_keys(node: Any, path: str = "") -> list[str]:
    """Paths of the non-empty values whose key names a credential, or that are shaped like one
    (a URI with a password or token, an access key, a web token), anywhere in a JSON document."""
    if isinstance(node, dict):
        found = []
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            named = _SECRET_KEY.search(str(key))
            if isinstance(value, str) and value and (named or carries_credentials(value)):
                found.append(where)
            # env as a list of {"name": ..., "value": ...}
            if key == "name" and _SECRET_KEY.search(str(value)) and node.get("value"):
                found.append(f"{path}.{value}")
            found += _secret_keys(value, where)
        return found
    if isinstance(node, list):
        return [p for i, value in enumerate(node) for p in _secret_keys(value, f"{path}[{i}]")]
    return []


def _json_object(value: str) -> None:
    if value:
        try:
            doc = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"is not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ValueError("must be a JSON object")
        secrets = _secret_keys(doc)
        if secrets:  # it becomes TrainJob and Dask pod specs, readable by anyone who can list them
            raise ValueError(
                f"holds credentials ({', '.join(secrets[:3])}); give pods credentials through "
                f"Kubernetes Secrets (manifests/README.md), never in the cluster target"
            )


# upper bounds: far past any real setting, short of what would exhaust a machine or a cluster
RULES: dict[str, Callable[[Any], None]] = {
    "run_id": _run_id,
    "run_date": _date,
    "window_days": _within(3, 366),
    "history_days": _within(0, 366),
    "seq_len": _within(1, 1024),
    "global_batch": _within(1, 1 << 20),
    "max_epochs": _within(1, 1000),
    "negative_keep": _within(0, 1, low_open=True),
    "negatives_per_positive": _within(0, 1e6),
    "max_restarts": _within(0, 100),
    "dask_workers": _within(0, 1000),
    "retention_days": _within(0, 3650),
    "deadline_hours": _within(0, 168),
    "timeout_hours": _within(0, 168),
    "trials": _within(1, 10_000),
    "min_epochs": _within(1, 1000),
    "reduction_factor": _within(2, 100),
    "min_auc": _within(0, 1),
    "tolerance": _within(0, 1, high_open=True),
    "launcher": _one_of(*LAUNCHERS),
    "tracking_uri": _tracking_uri,
    "raw_uri": _uri,
    "storage_root": _uri,
    "model_name": _model_name,
    "model_config": _model_config,
    "base_model": _model_config,
    "hardware_profile": _hardware,
    "cluster_target": _json_object,
}


def check_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` unchanged, or :class:`ParameterError` for the first one that cannot work."""
    for key, value in params.items():
        if isinstance(value, str) and _CONTROL.search(value):
            raise ParameterError(
                f"parameter {key}: {redact(value)!r} contains control characters "
                f"(newline, tab, ...)"
            )
        if isinstance(value, str) and value != redact(
            value
        ):  # a URI with credentials, in any parameter
            raise ParameterError(
                f"parameter {key}={redact(value)!r}: carries credentials (user:password@ or "
                f"a token in a URI); pass them through the environment (MLflow: "
                f"MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD; object stores: their own "
                f"variables), a Kubernetes Secret on the cluster (see docs/pipeline.md, Credentials)"
            )
        rule = RULES.get(key)
        if rule is None:
            continue
        try:
            rule(value)
        except (ValueError, TypeError) as exc:
            if str(exc).startswith("holds credentials"):  # never echo them
                raise ParameterError(f"parameter {key}: {exc}") from None
            shown = redact(value) if isinstance(value, str) else value
            raise ParameterError(f"parameter {key}={shown!r}: {exc}") from None
    if params.get("run_date"):  # the window with its history starts after the earliest day
        first = dt.date.fromisoformat(params["run_date"]) - dt.timedelta(
            days=int(params.get("window_days", 0)) + int(params.get("history_days", 0))
        )
        if first < EARLIEST_DATE:
            raise ParameterError(
                f"parameter run_date={params['run_date']!r}: its window and history start "
                f"{first}, before {EARLIEST_DATE}"
            )
    target = json.loads(params.get("cluster_target") or "{}")
    if params.get("launcher") == "trainjob" and "trainjob" not in target:
        raise ParameterError(
            'parameter cluster_target: launcher=trainjob needs its "trainjob" block '
            "(make deploy sets it from kube/clusters/<env>.json)"
        )
    if target and "storage_root" in params:
        from kube.types import MOUNT_PATH

        root = str(params["storage_root"]).rstrip("/")
        if root != MOUNT_PATH and not root.startswith(MOUNT_PATH + "/"):
            raise ParameterError(
                f"parameter storage_root={root!r}: on a cluster every pod (tasks, TrainJob, Dask "
                f"workers) mounts the shared volume at {MOUNT_PATH}; a storage root elsewhere is "
                f"not on it (use {MOUNT_PATH} or a folder under it)"
            )
    if params.get("dask_workers", 0) > 0 and "dask" not in target:
        raise ParameterError(
            'parameter cluster_target: dask_workers > 0 needs its "dask" block '
            "(make deploy sets it from kube/clusters/<env>.json)"
        )
    return params
