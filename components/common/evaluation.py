"""Evaluate's ``decision.json``: the daily verdict on the candidate, as one typed document.

:class:`Decision` is its one writer (:func:`components.evaluate.decision.decide` builds it, the
evaluate stage completes and writes it) and reader (:meth:`Decision.read`; see
:class:`components.common.document.Document`): register, the model card, the run summary, the
metrics exporter and the KFP adapter read attributes, never keys. docs/data.md describes every
field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from components.common.document import Document, DocumentError

DECISION = "decision.json"
DECISION_FORMAT = "dailyrec.decision/v1"


class DecisionError(DocumentError):
    """A decision no reader can use: the message names the file and the field."""


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
    champion_version: int | None = None
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
