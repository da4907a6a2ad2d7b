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


def register_forced(
    data: Path,
    out: Path,
    tracking_uri: str,
    seed: int,
    model_name: str = "ctr",
    window: dict | None = None,
    champion_version: int | None = None,
    **config,
):
    """Register an untrained checkpoint of ``data`` (trained on ``window``, default the data's)
    with a forced evaluation in ``out``, through the real register stage; its Registration."""
    from components.register.config import RegisterConfig
    from components.register.stage import register
    from tests.checkpoints import untrained_checkpoint

    forced_evaluation(out, champion_version=champion_version)
    checkpoint = untrained_checkpoint(out / "model.pt", data, seed, window=window)
    return register(
        RegisterConfig(
            checkpoint=str(checkpoint),
            metrics=str(out / "metrics.json"),
            decision=str(out / "decision.json"),
            model_name=model_name,
            tracking_uri=tracking_uri,
            data=str(data),
            **config,
        )
    )
