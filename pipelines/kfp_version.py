"""The KFP backend's version, checked before a pipeline is uploaded to it.

The daily pipeline needs a backend of at least :data:`pipelines.daily.MIN_KFP_BACKEND`, for the
features :data:`pipelines.daily.BACKEND_FEATURES` lists (an older one runs it wrongly rather than
refusing it: tasks stuck on optional Secrets, runs on the wrong day, successful runs reported
failed). The API server reports its release in the healthz answer
(``GET /apis/v2beta1/healthz``: ``tag_name``, next to ``commit_sha`` and ``multi_user``; see
kubeflow/pipelines ``backend/src/apiserver/main.go``). The generated client's response model keeps
only ``multi_user`` and ``pipeline_store``, so ``kfp.Client.get_kfp_healthz()`` drops the version:
the raw answer is read instead, through the same generated API.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from pipelines.daily import BACKEND_FEATURES, MIN_KFP_BACKEND


class UnsupportedBackend(ValueError):
    """The KFP backend is older than the pipeline needs (one line, with both versions)."""


def server_version(client: Any) -> str:
    """``tag_name`` of the KFP API server behind a ``kfp.Client`` ("unknown" when it does not say)."""
    response = client.healthzs.healthz_service_get_healthz(_preload_content=False)
    try:
        doc = json.loads(response.data)
    except ValueError:
        return "unknown"
    return str(doc.get("tag_name") or "unknown") if isinstance(doc, dict) else "unknown"


def parse_version(tag: str) -> tuple[int, int] | None:
    """(major, minor) of a release tag such as ``2.14.0`` or ``v2.15.1-rc.1``; None for anything else."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.|$|-)", tag.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_backend(client: Any, minimum: tuple[int, int] = MIN_KFP_BACKEND) -> str:
    """The server's version when it is at least ``minimum``; :class:`UnsupportedBackend` when older.

    A server that does not report a release (a development build says "unknown") is let through
    with a warning: nothing shows it is too old."""
    tag = server_version(client)
    version = parse_version(tag)
    needed = ".".join(map(str, minimum))
    if version is None:
        print(
            f"deploy: warning: the KFP API server reports version {tag!r}; this pipeline needs "
            f">= {needed}",
            file=sys.stderr,
        )
    elif version < minimum:
        missing = [what for release, what in BACKEND_FEATURES if version < release]
        raise UnsupportedBackend(
            f"the KFP backend is {tag}; dailyrec-daily needs >= {needed} "
            f"({'; '.join(missing)}): upgrade Kubeflow Pipelines"
        )
    return tag
