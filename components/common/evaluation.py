"""What evaluate hands on: ``metrics.json`` (:class:`Metrics`, what was measured) and
``decision.json`` (:class:`Decision`, the daily verdict), each one typed document.

Each class is its file's one writer (the evaluate stage; the gate,
:func:`components.evaluate.decision.decide`, builds the decision) and reader (``read``; see
:class:`components.common.document.Document`): register, the model card, the run summary, the
metrics exporter and the KFP adapter read attributes, never keys. docs/data.md describes every
field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from components.common.document import Document, DocumentError, bounded

DECISION = "decision.json"
DECISION_FORMAT = "dailyrec.decision/v1"
METRICS = "metrics.json"
METRICS_FORMAT = "dailyrec.metrics/v1"
TEST_METRICS = ("test_auc", "test_gauc", "test_logloss", "test_ece")
"""The candidate's four test metrics, as :class:`Metrics` names them."""


class DecisionError(DocumentError):
    """A decision no reader can use: the message names the file and the field."""


class MetricsError(DocumentError):
    """An evaluation's metrics no reader can use: the message names the file and the field."""


@dataclass(frozen=True)
class Metrics(Document):
    """The candidate's (and the champion's) test metrics, how serving scores them, the comparison,
    the data guards, the dataset, and the training's plan against what happened."""

    FILE: ClassVar[str] = METRICS
    FORMAT: ClassVar[str] = METRICS_FORMAT
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "model_name",
        "test_auc",
        "test_gauc",
        "test_logloss",
        "test_ece",
        "served",
        "champion",
        "dataset",
    )
    WHAT: ClassVar[str] = "evaluation metrics"
    ABSENT: ClassVar[str] = "evaluate did not finish"
    REWRITE: ClassVar[str] = "evaluate again"
    Error: ClassVar[type[DocumentError]] = MetricsError

    model_name: str
    """The registered model the candidate is judged for (required)."""
    test_auc: float
    """The candidate's AUC on the test split, on the dataset's features (required)."""
    test_gauc: float
    """Its group AUC, users as groups, weighted by impressions (required)."""
    test_logloss: float
    """Its log loss (required)."""
    test_ece: float
    """Its expected calibration error (required)."""
    served: Mapping[str, Any]
    """Scored as serving scores it (raw ids, the counter snapshot frozen at the window's end):
    ``auc``, ``auc_interval``, ``skew`` (dataset features vs served, paired, users as the unit),
    ``snapshot_only_auc`` (required)."""
    champion: Mapping[str, Any]
    """The champion: ``status`` (none, scored, unusable), ``version``, ``metrics``, ``served_auc``,
    ``reason`` (required)."""
    dataset: Mapping[str, Any]
    """The dataset judged on: ``path``, ``fingerprint``, ``window``, ``test_rows`` (required)."""
    candidate: Mapping[str, Any] = field(default_factory=dict)
    """Every metric of the candidate (the ``test_*`` above among them)."""
    test_auc_interval: Mapping[str, Any] | None = None
    """The test AUC's interval, users as the unit."""
    comparison: Mapping[str, Any] | None = None
    """The gate's comparison: candidate vs champion as each is served, paired, users as the unit
    (None: no champion scored)."""
    comparison_on_dataset_features: Mapping[str, Any] | None = None
    """The same comparison on the dataset's features."""
    candidate_checkpoint: str = ""
    """The checkpoint judged."""
    candidate_trained_on: Mapping[str, Any] | None = None
    """The dataset the checkpoint was trained on (its own record)."""
    calibration_bins: Mapping[str, Any] = field(default_factory=dict)
    """Reliability-diagram bins, by model."""
    guards: Mapping[str, Any] | None = None
    """The data guards' measurements, findings and whether they block."""
    data_profile: Mapping[str, Any] | None = None
    """The window's data profile (register stores it with the version: the next day's guards
    compare with it)."""
    plan_vs_actual: Mapping[str, Any] | None = None
    """The training's plan against what it measured (time, memory, cost)."""
    seconds: float = bounded(0, default=0.0)
    """Wall seconds of the stage."""
    mlflow_run_id: str | None = None
    """The evaluation's MLflow run."""
    source: Path | None = field(default=None, compare=False, repr=False)
    """The file it was read from (messages name it)."""

    def numbers(self) -> dict[str, float]:
        """The candidate's four test metrics by their names (:data:`TEST_METRICS`)."""
        return {name: getattr(self, name) for name in TEST_METRICS}


@dataclass(frozen=True)
class Decision(Document):
    """Blessed or not, each reason in one line, the rule it was judged by."""

    FILE: ClassVar[str] = DECISION
    FORMAT: ClassVar[str] = DECISION_FORMAT
    REQUIRED: ClassVar[tuple[str, ...]] = ("blessed", "reasons", "rule")
    WHAT: ClassVar[str] = "decision"
    ABSENT: ClassVar[str] = "evaluate did not finish"
    REWRITE: ClassVar[str] = "evaluate again"
    Error: ClassVar[type[DocumentError]] = DecisionError

    blessed: bool
    """The candidate may become the champion (required)."""
    reasons: tuple[str, ...]
    """One line per check, in order: the AUC floor, the champion comparison, the data guards
    (required)."""
    rule: Mapping[str, Any]
    """The gate's settings (:class:`components.evaluate.decision.GateRule`) (required)."""
    detectable_effect: float | None = None
    """The smallest AUC loss this day's test could detect with 80% power (None: no champion
    was scored)."""
    model_name: str = ""
    """The registered model the candidate is judged for."""
    test_auc: float | None = None
    """The candidate's test AUC on the dataset's features."""
    served_auc: float | None = None
    """The candidate's test AUC scored as serving scores it (the AUC the floor judges)."""
    champion_version: int | None = bounded(1, default=None)
    """The champion it was compared with (None: none registered)."""
    champion_status: str = "none"
    """``none`` (no champion), ``scored`` or ``unusable`` (it could not be scored today)."""
    comparison: Mapping[str, Any] | None = None
    """The paired comparison with the champion, users as the unit (delta, se, ci_low, ci_high,
    users, auc_a, auc_b)."""
    candidate_checkpoint: str = ""
    """The checkpoint judged."""
    source: Path | None = field(default=None, compare=False, repr=False)
    """The file it was read from (messages name it)."""


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation produced (:func:`components.evaluate.stage.evaluate`'s result)."""

    metrics: Metrics
    decision: Decision

    def line(self) -> str:
        """The verdict, the test metrics, the served AUC and the gate's reasons, in one line."""
        m, d = self.metrics, self.decision
        return (
            f"{'BLESSED' if d.blessed else 'NOT BLESSED'}: test AUC {m.test_auc:.4f}, "
            f"GAUC {m.test_gauc:.4f}, logloss {m.test_logloss:.4f}, ECE {m.test_ece:.4f}; "
            f"served AUC {m.served['auc']:.4f} "
            f"(train-serve skew {m.served['skew']['delta']:+.4f}); " + " | ".join(d.reasons[1:])
        )
