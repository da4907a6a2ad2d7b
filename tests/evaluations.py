"""An evaluation forced by hand, for tests that register a checkpoint without evaluating it
(rollback, integrity, the champion's checks): the two documents register reads, as evaluate
writes them."""

from __future__ import annotations

import math
from pathlib import Path

from components.common.evaluation import Decision, Metrics


def forced_evaluation(folder: Path, champion_version: int | None = None) -> Path:
    """A blessed decision (reason ``forced``, compared with ``champion_version``) and metrics with
    no measurement in ``folder``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    Decision(blessed=True, reasons=("forced",), rule={}, champion_version=champion_version).write(
        folder
    )
    nan = math.nan
    Metrics(
        model_name="dailyrec",
        test_auc=nan,
        test_gauc=nan,
        test_logloss=nan,
        test_ece=nan,
        served={},
        champion={"status": "none"},
        dataset={},
    ).write(folder)
    return folder
