"""The exit handler's work: the run's outcome and summary first, then the cleanup.

Order matters: the summary (``runs/<id>/summary.json``, ``runs/latest``) and the pushed outcome
are what operators and alerts read, so they are written before anything that talks to a cluster
or deletes files; each cleanup step that fails is recorded in the summary (``cleanup``), which is
then written again, and never hides the outcome.

1. find the run folder (never another live run's; refused ids still get a summary under the KFP
   run id, saying why);
2. decide the outcome (:mod:`components.common.final_status`: the backend's state when final,
   else the stages' done-records);
3. write the summary, print it, push it to the Pushgateway;
4. clean up: delete the run's TrainJob when the run did not succeed (the caller passes the
   deleter: cluster code lives in ``kube``), then apply the retention policy under the storage
   root's lock, keeping the registry's champion and previous lineage;
5. write the summary again with what the cleanup did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from components.common.final_status import final_status, stage_records
from components.common.lock import LockBusy, storage_lock
from components.common.paths import PathError, inside, safe_name
from components.common.progress import get_logger
from components.common.run_record import RunRecord, RunRecordError
from components.common.run_summary import RunSummary
from components.common.runs import STAGES, RunFolder, claimed_by_other, run_dir
from components.common.storage import remove_stale_temps

log = get_logger(__name__)
RETENTION_LOCK_WAIT_S = 120.0
"""How long the exit handler waits for another run's stage before skipping retention this time."""


def locate(storage_root: str, run_id: str, kfp_run_id: str) -> tuple[Path, str, str | None]:
    """(run folder, run id, why the given id was refused or None)."""
    rid, refused = run_id or kfp_run_id, None
    try:  # the same check as every other task: a run id never names a folder outside runs/
        folder = inside(storage_root, run_dir(storage_root, safe_name(rid, "run_id")), "run folder")
    except PathError as exc:  # the summary still gets written: under the KFP run id, saying why
        refused, rid = str(exc), safe_name(kfp_run_id, "KFP run id")
        folder = run_dir(storage_root, rid)
    if (other := claimed_by_other(folder, kfp_run_id)) is not None:  # never a live run's folder
        refused = f"run folder {folder} is in use by KFP run {other}"
        rid = safe_name(kfp_run_id, "KFP run id")
        folder = run_dir(storage_root, rid)
    return Path(folder), rid, refused


def champion_version(tracking_uri: str, model_name: str) -> int | None:
    """The registry's ``@champion`` version, for a run whose own files do not say it (it failed
    before evaluate, or registered nothing); None when there is none or the registry does not
    answer (the summary must not fail with it)."""
    from components.common.registry import CHAMPION, alias_version
    from components.common.registry_read import connect_readonly

    try:
        client = connect_readonly(tracking_uri, attempts=2)
        version = alias_version(client, model_name, CHAMPION)
    except Exception:  # no registry yet, or an unreachable or broken one: the champion is unknown
        return None
    return int(version.version) if version is not None else None


def protected_runs(tracking_uri: str, model_name: str) -> set[str]:
    """Run ids (:data:`PIPELINE_RUN_TAG`: their run folders) of the versions holding the registry's
    ``@champion`` and ``@previous``: retention keeps them and their datasets whatever their age."""
    from components.common.registry import CHAMPION, PIPELINE_RUN_TAG, PREVIOUS, alias_version
    from components.common.registry_read import NoRegistry, connect_readonly

    try:
        client = connect_readonly(tracking_uri, attempts=2)
    except NoRegistry:  # nothing registered: nothing to protect
        return set()
    found = set()
    for alias in (CHAMPION, PREVIOUS):
        version = alias_version(client, model_name, alias)
        run_id = (version.tags or {}).get(PIPELINE_RUN_TAG) if version is not None else None
        if run_id:
            found.add(run_id)
    return found


def finalize_run(
    state: str | None,
    error_message: str | None,
    storage_root: str,
    run_id: str,
    kfp_run_id: str,
    model_name: str,
    tracking_uri: str = "",
    retention_days: int = 0,
    delete_trainjob: Callable[[str], bool] | None = None,
    push: Callable[[RunSummary], object] | None = None,
) -> RunSummary:
    """Decide, summarise, push, clean up; returns the summary as written last.

    ``delete_trainjob(train_out)``: deletes the TrainJob of a training output folder (True when
    one was deleted); given only when the run trained on a cluster.
    """
    folder, rid, refused = locate(storage_root, run_id, kfp_run_id)
    run = RunFolder(folder)
    try:
        record = RunRecord.read(folder)
        data_dir, raw_uri = record.data_dir, record.raw_uri
    except RunRecordError as exc:  # failed before the window was resolved (or lost its record)
        print(f"finalize: {exc}; the summary has no dataset", flush=True)
        data_dir = raw_uri = ""
    for leftover in run.outputs():
        remove_stale_temps(leftover)
    done = stage_records(folder, STAGES)
    outcome = final_status(state, error_message, done=list(done), stages=STAGES)
    error = outcome.error
    if refused:
        error = f"{refused}; {error or ''}".rstrip("; ")
    summary = RunSummary.build(
        folder, data_dir, raw_uri, model_name, rid, status=outcome.status, error=error
    )
    champion = summary.champion_version
    if champion is None and tracking_uri:  # registered nothing, or failed before evaluate
        champion = champion_version(tracking_uri, model_name)
    summary = dataclasses.replace(
        summary,
        champion_version=champion,
        kfp_state=state,
        outcome_from=outcome.decided_by,
        cleanup={"state": "pending"},
    )
    summary.write(folder)
    print(summary.text(), flush=True)
    if push is None:
        from components.common.monitoring import push_run_outcome as push
    push(summary)  # to $DAILYREC_PUSHGATEWAY when set; never raises

    cleanup = _cleanup(
        run.train if outcome.failed else None,
        delete_trainjob,
        storage_root,
        rid,
        tracking_uri,
        model_name,
        retention_days,
    )
    summary = dataclasses.replace(summary, cleanup=cleanup)
    summary.write(folder)
    return summary


def _cleanup(
    failed_train: Path | None,
    delete_trainjob: Callable[[str], bool] | None,
    storage_root: str,
    rid: str,
    tracking_uri: str,
    model_name: str,
    retention_days: int,
) -> dict:
    """After the summary is written: delete a failed run's TrainJob (``failed_train``: its
    training folder), then the retention pass; what was done and what failed, for the summary."""
    cleanup: dict = {"state": "done", "errors": []}
    if failed_train is not None and delete_trainjob is not None:
        try:
            cleanup["trainjob"] = "deleted" if delete_trainjob(str(failed_train)) else "none"
        except Exception as exc:  # an API error must not lose the summary written above
            cleanup["trainjob"] = "failed"
            cleanup["errors"].append(f"deleting the TrainJob: {_why(exc)}")
    if retention_days > 0:
        cleanup["retention"] = _retention(
            storage_root, rid, tracking_uri, model_name, retention_days
        )
        cleanup["errors"] += cleanup["retention"].get("errors", [])
    if cleanup["errors"]:
        cleanup["state"] = "failed"
        for problem in cleanup["errors"]:
            print(f"[dailyrec] warning: cleanup: {problem}", flush=True)
    elif "retention" in cleanup:
        print(f"[dailyrec] {cleanup['retention']['line']}", flush=True)
    return cleanup


def _why(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    text = " ".join(str(getattr(exc, "reason", None) or exc).split())[:200]
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {text}"


def _retention(
    storage_root: str, rid: str, tracking_uri: str, model_name: str, keep_days: int
) -> dict:
    """The retention pass as a summary entry; skipped (with the reason) when the registry cannot
    say what the champion needs, or another run's stage holds the lock."""
    from components.common.retention import apply_retention

    try:
        protected = protected_runs(tracking_uri, model_name) if tracking_uri else set()
    except Exception as exc:  # never delete what the champion may need without knowing it
        return _skipped(f"the registry is unreachable ({_why(exc)})")
    try:
        with storage_lock(storage_root, rid, stage="retention", wait_s=RETENTION_LOCK_WAIT_S):
            report = apply_retention(storage_root, keep_days, protected, current_run=rid)
    except LockBusy as exc:
        return _skipped(str(exc))
    except OSError as exc:
        return {**_skipped(_why(exc)), "errors": [f"retention: {_why(exc)}"]}
    return {**report.state_dict(), "line": report.line()}


def _skipped(why: str) -> dict:
    return {"skipped": why, "errors": [], "line": f"retention skipped this time: {why}"}


def warm_start_record(
    asked: bool, model_name: str, version: str | None, trained: dict | None
) -> dict:
    """What a run's training started from, for its summary and console: ``asked`` (the
    ``warm_start`` parameter), the champion ``version`` found (None: none), and what the trainer
    says of it (``{"from", "applied", "reason"}``; None: it was given nothing)."""
    applied = bool(trained and trained.get("applied"))
    if not asked:
        line = "off (warm_start=false): trained from scratch"
    elif version is None:
        line = f"no champion of {model_name} yet: trained from scratch"
    elif applied:
        line = f"from {model_name} v{version}'s weights"
    else:
        reason = (trained or {}).get("reason") or "not applied"
        line = f"{model_name} v{version}'s weights not used ({reason}): trained from scratch"
    return {"asked": asked, "version": version, "applied": applied, "line": line}
