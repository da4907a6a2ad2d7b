"""How a run ended, in one vocabulary, from what the exit handler is given and what the run left.

The exit handler's ``dsl.PipelineTaskFinalStatus`` speaks two vocabularies:

- kfp.local: ``SUCCEEDED`` or ``FAILED``, with an error message on failure (the SDK documents
  ``CANCELLED`` too);
- a KFP backend: the last known MLMD state of the exit handler's DAG, ``COMPLETE``, ``CACHED``,
  ``FAILED``, ``CANCELED``, and often ``RUNNING`` (also ``NEW``, ``UNKNOWN``), with an empty
  error message (kubeflow/pipelines ``backend/src/v2/driver/resolve.go``).

The backend recomputes a DAG's state only after a *container* task inside it finishes
(``launcher_v2.go`` -> ``UpdateDAGExecutionsState`` in ``metadata/client.go``; one level deep
before 2.17). So the state it hands the exit handler can be stale: a final one (complete,
failed, cancelled) is believed; one that is not final is no verdict at all. The outcome is then
decided from the run's own records: every stage writes a done-record into the run folder when it
finishes (:func:`components.common.runs.record_stage`), so "every stage done" is a success and a
missing record names the stage that did not finish. The backend's state is kept beside it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from components.common.records import claimed_at, read_record

SUCCEEDED, FAILED, CANCELED = "SUCCEEDED", "FAILED", "CANCELED"
FINAL_STATES = {
    # kfp.local and the SDK's documented values
    "SUCCEEDED": SUCCEEDED,
    "FAILED": FAILED,
    "CANCELLED": CANCELED,
    # MLMD execution states (ml_metadata Execution.State), as the KFP backend driver passes them
    "COMPLETE": SUCCEEDED,
    "CACHED": SUCCEEDED,
    "CANCELED": CANCELED,
}
NOT_FINAL = ("RUNNING", "NEW", "UNKNOWN", "")
"""MLMD states that say nothing about the outcome: the DAG's state was not recomputed yet."""
BACKEND, RECORDS = "backend", "run records"


def stage_records(folder: str | Path, stages: Sequence[str]) -> dict[str, dict]:
    """The done-record of each of ``stages`` *this* run finished, by stage: a record older than the
    folder's claim (``owner.json``) was left by an earlier run of the same id and does not count."""
    from components.common.runs import RunFolder

    run = RunFolder(Path(folder))
    since = claimed_at(run.path)
    records = {}
    for stage in stages:
        path = run.stage_record(stage)
        record = read_record(path)
        problem = record_problem(record) if record else None
        if problem:  # not what record_stage writes: no proof the stage finished
            print(f"dailyrec: {path}: {problem}: not counted as done", file=sys.stderr, flush=True)
        elif record and record["finished"] >= since:
            records[stage] = record
    return records


def record_problem(record: dict) -> str | None:
    """Why a stage's done-record is not one :func:`components.common.runs.record_stage` wrote
    (``seconds`` and ``finished``: numbers >= 0), or None."""
    for key in ("seconds", "finished"):
        value = record.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not 0 <= value < math.inf:
            return f"{key} {value!r}: expected a number >= 0"
    return None


@dataclass(frozen=True)
class FinalStatus:
    status: str
    """SUCCEEDED | FAILED | CANCELED."""
    error: str | None
    """Why it did not succeed (None when it did)."""
    decided_by: str = BACKEND
    """`backend` (its state was final) or `run records` (it was not: the stages' records)."""
    failed_stage: str | None = None
    """The first stage without a done-record, when the records decided a failure."""

    @property
    def failed(self) -> bool:
        return self.status != SUCCEEDED


def final_status(
    state: str | None,
    error_message: str | None = None,
    done: Sequence[str] | None = None,
    stages: Sequence[str] = (),
) -> FinalStatus:
    """The normalised outcome of a run whose exit handler saw ``state`` (either vocabulary).

    ``done``: the stages whose done-record this run wrote; ``stages``: every stage a successful
    run completes. A final state decides alone; any other (``RUNNING``, ``NEW``, ``UNKNOWN``,
    empty, a spelling no release uses) is decided from the records: success when every stage is
    done, else a failure in the first stage that is not.
    """
    raw = (state or "").strip().upper()
    status = FINAL_STATES.get(raw)
    if status == SUCCEEDED:
        return FinalStatus(SUCCEEDED, None)
    if status is not None:
        return FinalStatus(
            status,
            error_message
            or f"the run ended {raw} (the KFP backend gives no message: see the failed task's log)",
        )
    shown = repr(state or "")
    missing = [s for s in stages if s not in set(done or ())]
    if stages and not missing:
        return FinalStatus(SUCCEEDED, None, RECORDS)
    if not stages:  # nothing to decide from: not known to have succeeded
        return FinalStatus(FAILED, f"the run ended in the state {shown}", RECORDS)
    return FinalStatus(
        FAILED,
        error_message
        or f"stage {missing[0]} did not finish (the KFP backend reported {shown}: see its task's log)",
        RECORDS,
        missing[0],
    )
