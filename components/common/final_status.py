"""How a run ended, in one vocabulary, from what the exit handler is given.

The exit handler's ``dsl.PipelineTaskFinalStatus`` speaks two vocabularies:

- kfp.local: ``SUCCEEDED`` or ``FAILED``, with an error message on failure (the SDK documents
  ``CANCELLED`` too);
- a KFP backend (>= 2.14): the MLMD execution state of the exit handler's DAG, ``COMPLETE``,
  ``CACHED``, ``FAILED``, ``CANCELED`` (also ``UNKNOWN``, ``NEW``, ``RUNNING``), and an empty error
  message (kubeflow/pipelines ``backend/src/v2/driver/resolve.go`` does not fill it yet).

So success is decided on the state alone, never on the message, and anything not known to be
a success counts as a failure: the cleanup of a failed run (its TrainJob deleted) must not be
skipped because a backend spelled a state differently.
"""

from __future__ import annotations

from dataclasses import dataclass

SUCCEEDED, FAILED, CANCELED = "SUCCEEDED", "FAILED", "CANCELED"
STATES = {
    # kfp.local and the SDK's documented values
    "SUCCEEDED": SUCCEEDED,
    "FAILED": FAILED,
    "CANCELLED": CANCELED,
    # MLMD execution states (ml_metadata Execution.State), as the KFP backend driver passes them
    "COMPLETE": SUCCEEDED,
    "CACHED": SUCCEEDED,
    "CANCELED": CANCELED,
    "UNKNOWN": FAILED,
    "NEW": FAILED,
    "RUNNING": FAILED,
}


@dataclass(frozen=True)
class FinalStatus:
    status: str
    """SUCCEEDED | FAILED | CANCELED."""
    error: str | None
    """Why it did not succeed (None when it did)."""

    @property
    def failed(self) -> bool:
        return self.status != SUCCEEDED


def final_status(state: str | None, error_message: str | None = None) -> FinalStatus:
    """The normalised outcome of a run whose exit handler saw ``state`` (either vocabulary)."""
    raw = (state or "").strip().upper()
    status = STATES.get(raw, FAILED)
    if status == SUCCEEDED:
        return FinalStatus(SUCCEEDED, None)
    if error_message:
        return FinalStatus(status, error_message)
    if raw not in STATES:
        return FinalStatus(status, f"the run ended in the unknown state {state!r}")
    return FinalStatus(
        status, f"the run ended {raw} (the KFP backend gives no message: see the failed task's log)"
    )
