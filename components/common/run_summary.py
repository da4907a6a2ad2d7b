"""The run summary, ``runs/<run id>/summary.json``: how one pipeline run ended, in one document.

The exit handler builds it from what the stages left in the run folder (:meth:`RunSummary.build`:
the dataset's meta, the plan, the training summary, the metrics and decision, the registration,
this run's stage records), writes it, prints it (:meth:`RunSummary.text`) and pushes it to the
Pushgateway; ``make run`` adds the wall-clock time and the log folder, and the dashboard reads
it back. A stage that did not run leaves its fields null. Its format is in docs/data.md (Run
summary); one written before the summary carried a ``format`` reads as the first version, which
has the same fields.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from components.common import schema
from components.common.dataset import SPLITS, DatasetError
from components.common.dataset_meta import DatasetMeta
from components.common.document import Document, DocumentError
from components.common.evaluation import TEST_METRICS, Decision, Metrics
from components.common.final_status import CANCELED, FAILED, SUCCEEDED, stage_records
from components.common.plan import BRIEF, drift_lines, read_plan
from components.common.records import read_record
from components.common.registration import Registration
from components.common.runs import STAGES, SUMMARY, RunFolder
from components.common.train_summary import TrainSummary

RUN_SUMMARY_FORMAT = "dailyrec.run-summary/v1"
"""The format this code writes and reads."""


class RunSummaryError(DocumentError):
    """A run summary that cannot be read (one line naming the file and what is wrong)."""


@dataclass(frozen=True)
class RunSummary(Document):
    """How one run ended: its outcome, data, plan, model, decision, registry and timings."""

    FILE: ClassVar[str] = SUMMARY
    FORMAT: ClassVar[str] = RUN_SUMMARY_FORMAT
    REQUIRED: ClassVar[tuple[str, ...]] = ("run_id", "status")
    WHAT: ClassVar[str] = "run summary"
    ABSENT: ClassVar[str] = "the run has not ended, or was killed before its exit handler"
    REWRITE: ClassVar[str] = "run the pipeline again"
    Error: ClassVar[type[DocumentError]] = RunSummaryError
    UNVERSIONED_IS_FIRST: ClassVar[bool] = True

    run_id: str
    """The run's folder name under ``runs/`` (required)."""
    status: str
    """SUCCEEDED, FAILED or CANCELED (required)."""
    error: str | None = None
    """Why it did not succeed (None when it did)."""
    failed_stage: str | None = None
    """The first stage this run did not finish, when it did not succeed."""
    run_date: str | None = None
    """The window's last day, YYYY-MM-DD."""
    window: Mapping[str, Any] = field(default_factory=dict)
    """The dataset's window (``end``, ``train_days``, ``val_days``, ``test_days``, ...)."""
    dataset: str = ""
    """The dataset folder the run used."""
    dataset_fingerprint: str | None = None
    """The dataset's fingerprint."""
    dataset_rows: Mapping[str, int | None] = field(default_factory=lambda: dict.fromkeys(SPLITS))
    """Rows per split (``train``, ``val``, ``test``)."""
    best_val_auc: float | None = None
    """The training's best validation AUC."""
    epochs_run: int | None = None
    """Epochs the training ran."""
    test_auc: float | None = None
    """The candidate's test AUC on the dataset's features."""
    test_gauc: float | None = None
    """Its group AUC, users as groups."""
    test_logloss: float | None = None
    """Its log loss."""
    test_ece: float | None = None
    """Its expected calibration error."""
    served_auc: float | None = None
    """Its test AUC scored as serving scores it (what the gate judges)."""
    oracle_auc: float | None = None
    """The Bayes-optimal AUC of the test days, when the logs are generated."""
    blessed: bool | None = None
    """The decision: may the candidate become the champion (None: not evaluated)."""
    decision_reasons: tuple[str, ...] | None = None
    """The decision's reasons, one line per check."""
    model_name: str = ""
    """The registered model."""
    model_version: int | None = None
    """The version this run registered."""
    champion_version: int | None = None
    """The ``@champion`` version after the run."""
    previous_version: int | None = None
    """The ``@previous`` version after the run."""
    model_card: str | None = None
    """Where the registered version's model card is."""
    stage_seconds: Mapping[str, float | None] = field(default_factory=lambda: dict.fromkeys(STAGES))
    """Wall-clock seconds of each stage this run finished (None: not finished)."""
    total_seconds: float = 0.0
    """Their sum."""
    plan: Mapping[str, Any] = field(default_factory=lambda: dict.fromkeys(BRIEF))
    """The plan's brief (:data:`components.common.plan.BRIEF`)."""
    plan_vs_actual: Mapping[str, Any] | None = None
    """The training's plan against what it measured (time, memory, throughput)."""
    run_folder: str = ""
    """The run's folder."""
    warm_start: Mapping[str, Any] | None = None
    """What training started from: ``asked``, ``version``, ``applied``, ``line``."""
    kfp_state: str | None = None
    """The final state the KFP backend (or kfp.local) gave the exit handler."""
    outcome_from: str | None = None
    """What decided the status: the backend's state, or the stages' records."""
    cleanup: Mapping[str, Any] | None = None
    """What the exit handler's cleanup did (``state``: pending, done, failed; ``errors``)."""
    wall_seconds: float | None = None
    """``make run``: the run's wall-clock seconds."""
    logs: str | None = None
    """``make run``: the folder of its task logs."""
    source: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise RunSummaryError(f"run_id {self.run_id!r}: expected a run folder name")
        if self.status not in (SUCCEEDED, FAILED, CANCELED):
            raise RunSummaryError(
                f"status {self.status!r}: expected {SUCCEEDED}, {FAILED} or {CANCELED}"
            )

    @property
    def succeeded(self) -> bool:
        return self.status == SUCCEEDED

    @classmethod
    def build(
        cls,
        folder: str | Path,
        data_dir: str | Path,
        raw_uri: str,
        model_name: str,
        run_id: str,
        status: str = SUCCEEDED,
        error: str | None = None,
    ) -> RunSummary:
        """The summary from what this run's stages left in ``folder`` (records an earlier run of
        the same id left do not count); what a stage did not leave is null."""
        run = RunFolder(Path(folder))
        meta = _dataset_meta(data_dir)
        plan = _plan(run.plan)
        train = TrainSummary.find(run.train)
        metrics = Metrics.find(run.evaluate)
        decision = Decision.find(run.evaluate)
        registration = Registration.find(run.registration)
        done = stage_records(run.path, STAGES)
        seconds = {s: done[s]["seconds"] if s in done else None for s in STAGES}
        window = dataclasses.asdict(meta.window) if meta and meta.window else {}
        if registration:
            champion = registration.champion_version
        else:
            champion = decision.champion_version if decision else None
        return cls(
            run_id=run_id,
            status=status,
            error=error,
            failed_stage=(
                next((s for s in STAGES if s not in done), None) if status != SUCCEEDED else None
            ),
            run_date=window.get("end"),
            window=window,
            dataset=str(data_dir),
            dataset_fingerprint=meta.fingerprint if meta else None,
            dataset_rows={
                s: meta.splits[s].rows if meta and s in meta.splits else None for s in SPLITS
            },
            best_val_auc=_number(train.best_val_auc) if train else None,
            epochs_run=train.epochs_run if train else None,
            **{k: _number(getattr(metrics, k, None)) for k in TEST_METRICS},
            served_auc=_number(metrics.served.get("auc")) if metrics else None,
            oracle_auc=oracle_auc(raw_uri, window.get("test_days")),
            blessed=decision.blessed if decision else None,
            decision_reasons=tuple(decision.reasons) if decision else None,
            model_name=model_name,
            model_version=registration.version if registration else None,
            champion_version=champion,
            previous_version=registration.previous_version if registration else None,
            model_card=registration.model_card if registration else None,
            stage_seconds=seconds,
            total_seconds=round(sum(v for v in seconds.values() if v), 3),
            plan=plan.brief() if plan else dict.fromkeys(BRIEF),
            plan_vs_actual=train.plan_vs_actual if train else None,
            run_folder=str(run.path),
            warm_start=(done.get("train") or {}).get("warm_start"),
        )

    def text(self) -> str:
        """The readable end of a run."""

        def f(value, fmt=".4f"):
            return "—" if value is None else format(value, fmt)

        rows, plan = self.dataset_rows, self.plan
        verdict = {True: "BLESSED", False: "NOT BLESSED"}.get(self.blessed, "not evaluated")
        registry = (
            f"version {self.model_version} registered; "
            if self.model_version
            else "nothing registered; "
        )
        registry += (
            f"champion = v{self.champion_version}" if self.champion_version else "no champion"
        )
        if self.previous_version:
            registry += f", previous = v{self.previous_version}"
        warm = self.warm_start
        lines = [
            f"run {self.run_id}: {self.status}"
            + (f" in stage {self.failed_stage}" if self.failed_stage else "")
            + (f" ({self.error})" if self.error else ""),
            f"  data     {self.run_date}  train {f(rows.get('train'), ',')} / "
            f"val {f(rows.get('val'), ',')} / test {f(rows.get('test'), ',')} rows",
            f"  plan     {plan.get('model')} on {plan.get('nproc_per_node')} process(es), "
            f"micro-batch {plan.get('micro_batch')} x accum {plan.get('grad_accum')}, "
            f"{plan.get('precision')}",
            f"  model    best val AUC {f(self.best_val_auc)} after {self.epochs_run} epoch(s); "
            f"test AUC {f(self.test_auc)}  GAUC {f(self.test_gauc)}"
            + (f"  served AUC {f(self.served_auc)}" if self.served_auc else "")
            + (f"  (oracle {f(self.oracle_auc)})" if self.oracle_auc else ""),
            *(
                [f"  warm     {warm['line']}"]
                if isinstance(warm, Mapping) and "line" in warm
                else []
            ),
            f"  decision {verdict}"
            + "".join(f"\n           - {r}" for r in self.decision_reasons or ()),
            f"  registry {self.model_name}: {registry}",
            *([f"  card     {self.model_card}"] if self.model_card else []),
            "  seconds  " + ", ".join(f"{k} {f(self.stage_seconds.get(k), '.1f')}" for k in STAGES),
        ]
        lines += [f"  estimate {line}" for line in drift_lines(self.plan_vs_actual)]
        return "\n".join(lines)


def _number(value: Any) -> float | None:
    return None if not isinstance(value, int | float) or math.isnan(value) else float(value)


def _plan(path: Path):
    """The run's plan, or None where estimate left none (or one no stage could read)."""
    try:
        return read_plan(path)[0]
    except ValueError:
        return None


def _dataset_meta(data_dir: str | Path) -> DatasetMeta | None:
    """The dataset's meta.json, or None where preprocess left none (or one no stage could read)."""
    try:
        return DatasetMeta.read(data_dir, splits=()) if str(data_dir) else None
    except DatasetError:
        return None


def oracle_auc(raw_uri: str, test_days: str | None) -> float | None:
    """Mean Bayes-optimal AUC of the test days when the raw data is generated (its description,
    :func:`components.common.schema.datagen_summary`, says)."""
    if not raw_uri or "://" in raw_uri or not test_days:
        return None
    doc = read_record(schema.datagen_summary(raw_uri))
    first, _, last = test_days.partition(" .. ")
    by_day = doc.get("oracle_auc")
    values = [
        v
        for day, v in (by_day if isinstance(by_day, dict) else {}).items()
        if first <= day <= (last or first)
    ]
    return round(sum(values) / len(values), 4) if values else None
