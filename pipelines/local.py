"""`make run`: the daily pipeline on this machine through KFP's local runner.

`python -m pipelines.local [--config configs/local.json] [--data data/raw] [--root .] [--set key=value ...]
[--runner subprocess|docker [--image IMAGE]]`

The same `dailyrec-daily` pipeline as on the cluster, run by `kfp.local`, built without what
kfp.local cannot use (the schedule-time placeholder, retries: `pipelines/daily.py`):

* `--runner subprocess` (`make run`): `SubprocessRunner(use_venv=False)`, every task a
  subprocess of this environment;
* `--runner docker` (`make run RUNNER=docker`): `DockerRunner`, every task in the runtime
  image (`make images`) with docker or podman, as the image's user, the storage root at the
  cluster's mount path (`/mnt/dailyrec`), no network (`pipelines/task_containers.py`).

Storage is a local folder (`--root`): `datasets/<date>-<key>/`, `runs/<run id>/` (and
`runs/latest/summary.json`), MLflow on SQLite at `runs/mlflow.db`. KFP's own working folders
and temp files stay under the run folder (`runs/<run id>/kfp/`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from components.common.cli import Exit, cli_parser, exit_for, signal_exit
from components.common.final_status import CANCELED, FAILED
from components.common.lock import LockBusy, lock_path, storage_lock
from components.common.paths import PathError, inside, safe_name
from components.common.proctree import Stopped, orphan_watchdog, stop_tree_on_signals
from components.common.records import read_record
from components.common.run_summary import RunSummary
from components.common.runs import (
    DRIVER,
    ELSEWHERE,
    LATEST,
    OWNER,
    RUNNING,
    SUMMARY,
    driver_state,
    record_driver,
    run_dir,
)
from components.common.storage import atomic_write_json
from components.common.tracking import sqlite_uri
from pipelines.console import RunConsole
from pipelines.params import check_parameters

DEFAULT_CONFIG = "configs/local.json"
RUNNERS = ("subprocess", "docker")
LOCAL_IMAGE = "localhost/dailyrec-runtime:dev"
"""The runtime image ``make images`` builds: what ``--runner docker`` runs the tasks in by default."""
LOGS = "logs"
"""Folder of a run's full logs: every task's output (``<task>.log``) and KFP's transcript (``pipeline.log``)."""


class LocalRunError(RuntimeError):
    pass


def pipeline_parameters(pipeline=None) -> dict:
    """Parameter defaults of a KFP pipeline function (default: the daily pipeline)."""
    if pipeline is None:
        from pipelines.daily import daily as pipeline

    parameters = inspect.signature(pipeline.pipeline_func).parameters
    return {name: p.default for name, p in parameters.items()}


def set_overrides(items: list[str]) -> dict[str, str]:
    """The parameters of repeated ``--set KEY=VALUE`` options, as given (strings)."""
    bad = [item for item in items if "=" not in item]
    if bad:  # dict() of it would say only "dictionary update sequence element #0 ..."
        raise LocalRunError(f"--set {bad[0]!r}: expected KEY=VALUE")
    return dict(item.split("=", 1) for item in items)


def load_config(path: str | Path | None, overrides: dict | None = None, pipeline=None) -> dict:
    """Pipeline parameters from a JSON file (keys starting with _ are comments) plus overrides,
    checked against ``pipeline``'s parameters (default: the daily pipeline)."""
    params = {}
    if path:
        try:
            params = {
                k: v for k, v in json.loads(Path(path).read_text()).items() if not k.startswith("_")
            }
        except (OSError, ValueError) as exc:
            raise LocalRunError(f"{path}: cannot read the run config ({exc})") from None
    params |= overrides or {}
    known = pipeline_parameters(pipeline)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise LocalRunError(
            f"{path or '--set'}: unknown pipeline parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(known)}"
        )
    for key, value in params.items():  # --set values arrive as strings
        default = known[key]
        if isinstance(value, str) and not isinstance(default, str):
            try:
                value = json.loads(value.lower() if isinstance(default, bool) else value)
            except (
                ValueError
            ):  # json's own message ("Expecting value: line 1 ...") names no parameter
                raise LocalRunError(
                    f"{path or '--set'}: parameter {key} must be a "
                    f"{type(default).__name__}, got {value!r}"
                ) from None
        if isinstance(value, dict | list) and isinstance(default, str):
            value = json.dumps(value)  # a JSON-valued text parameter may be JSON in the file
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # KFP refuses an int for a float parameter
        if type(value) is not type(default):
            raise LocalRunError(
                f"{path or '--set'}: parameter {key} must be a {type(default).__name__}, "
                f"got {value!r}"
            )
        params[key] = value
    return params


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]


def run_local(
    params: dict,
    root: str | Path = ".",
    run_id: str | None = None,
    verbose: bool = False,
    runner: str = "subprocess",
    image: str = LOCAL_IMAGE,
) -> RunSummary:
    """Run the pipeline locally; return the run's summary (also on failure: status says so). The terminal
    gets a short console, ``runs/<run id>/logs/`` every line (``verbose``: the terminal gets them too).
    ``runner``: ``subprocess`` (tasks in this environment) or ``docker`` (tasks in ``image``)."""
    from pipelines.daily import daily_pipeline
    from pipelines.steps import LOCAL

    daily = daily_pipeline(LOCAL)  # no schedule time, no retries: what kfp.local can run
    if runner not in RUNNERS:
        raise LocalRunError(f"--runner {runner!r}: expected one of {', '.join(RUNNERS)}")
    engine = check_engine(image, params) if runner == "docker" else None
    if engine:
        in_image(daily, image)

    root = Path(root).resolve()
    with local_run(params, root, run_id, engine) as (run_id, folder, params):
        started = time.perf_counter()
        logs = folder / LOGS
        where = f"tasks in {image} ({engine})" if engine else "tasks as subprocesses"
        print(
            f"dailyrec: run {run_id} (folder {folder}); KFP local runner, {where}; "
            f"full logs in {logs}",
            flush=True,
        )
        try:
            with quiet_console(logs, verbose), containers_stopped(engine, run_id):
                daily(**params)
        except (
            Stopped
        ) as exc:  # the task tree is stopped already: record why, then let it end the process
            write_stopped_summary(folder, run_id, str(exc))
            raise
        seconds = time.perf_counter() - started
        summary = RunSummary.find(folder) or RunSummary(
            run_id, FAILED, error="the pipeline wrote no summary", run_folder=str(folder)
        )
        summary = dataclasses.replace(summary, wall_seconds=round(seconds, 1), logs=str(logs))
        summary.write(folder)
        write_latest(root, summary)
        shutil.rmtree(folder / "kfp" / "tmp", ignore_errors=True)
        return summary


def check_engine(image: str, params: dict) -> str:
    """The container engine that answers and has ``image``, for a run with ``params``; a
    :class:`LocalRunError` saying what to do otherwise. A warning when the image was built from
    other code than this checkout's."""
    from components.common.tracking import code_version
    from pipelines.containers import PODMAN_SETTINGS, engine
    from pipelines.task_containers import image_code_version, image_present

    tracking = params.get("tracking_uri") or ""
    if tracking.startswith("sqlite:"):
        raise LocalRunError(
            f"tracking_uri {tracking}: the task containers see only the storage root; leave it "
            "empty for the registry in ROOT/runs/mlflow.db, or name a server"
        )
    found = engine()
    if found is None:
        raise LocalRunError(
            "--runner docker: no container engine answers (install docker or podman; "
            f"with podman here: CONTAINERS_CONF={PODMAN_SETTINGS})"
        )
    if not image_present(found, image):
        raise LocalRunError(f"--runner docker: image {image} not found in {found}: make images")
    built = image_code_version(found, image)
    if built != code_version():
        print(
            f"dailyrec: warning: {image} holds code {built or '?'}, this checkout is "
            f"{code_version()}: the tasks run the image's (make images to rebuild)",
            file=sys.stderr,
        )
    return found


def in_image(pipeline, image: str) -> None:
    """Point every task of the built ``pipeline`` at ``image`` (the components name the cluster's
    reference; kfp.local runs what the pipeline spec names)."""
    for _, executor in pipeline.pipeline_spec.deployment_spec["executors"].items():
        executor["container"]["image"] = image


@contextlib.contextmanager
def containers_stopped(engine: str | None, run_id: str) -> Iterator[None]:
    """The run's task containers stopped and removed when the block ends early (a signal, an error):
    they are not this process's children, so stopping its process tree misses them."""
    if engine is None:
        yield
        return
    from pipelines.task_containers import stop_run

    try:
        yield
    except BaseException:
        stop_run(engine, run_id)
        raise


@contextlib.contextmanager
def quiet_console(logs: Path, verbose: bool = False) -> Iterator[RunConsole | None]:
    """KFP's local runner writes to ``sys.stdout``: a short console on the terminal, the rest in ``logs``
    (:mod:`pipelines.console`); ``verbose`` shows everything as KFP prints it."""
    if verbose:
        yield None
        return
    console = RunConsole(logs, sys.stdout)
    try:
        with contextlib.redirect_stdout(console):
            yield console
    finally:
        console.close()


def write_latest(root: Path, summary: RunSummary) -> Path:
    """``runs/latest/summary.json``: the newest run's summary, written atomically as every summary
    is, into a real folder of the storage root (a symlink there is removed, never written
    through: it could lead anywhere)."""
    latest = run_dir(root, LATEST)
    if latest.is_symlink():
        latest.unlink()
    return summary.write(latest)


def write_stopped_summary(folder: Path, run_id: str, reason: str) -> None:
    """The summary of a run stopped by a signal, from what its stages had done by then (its exit
    handler was cut short or never ran): every stage finished, SUCCEEDED with what it registered
    and promoted; else CANCELED in the first stage that did not finish."""
    from components.common.final_status import SUCCEEDED, stage_records
    from components.common.run_record import RunRecord
    from components.common.runs import STAGES

    done = stage_records(folder, STAGES)
    record = RunRecord.find(folder)
    earlier = RunSummary.find(folder)
    finished = all(stage in done for stage in STAGES)
    summary = RunSummary.build(
        folder,
        record.data_dir if record else "",
        record.raw_uri if record else "",
        earlier.model_name if earlier else "",
        run_id,
        SUCCEEDED if finished else CANCELED,
        f"{reason} after every stage had finished" if finished else reason,
    )
    summary.write(folder)


def resolve_run_id(params: dict, run_id: str | None) -> str:
    """The run id: ``--run-id``, else the ``run_id`` parameter, else a new one; the two may not differ."""
    given = params.get("run_id") or ""
    if run_id and given and run_id != given:
        raise LocalRunError(f"--run-id {run_id!r} and parameter run_id={given!r} differ: give one")
    return run_id or given or new_run_id()


def close_dead_runs(root: Path, run_id: str, tracking_uri: str) -> list[str]:
    """What runs killed before their end left open, closed; returns what was said.

    Called with the storage root's lock held: a run folder without a summary (killed before its
    exit handler) whose recorded driver process is gone gets one, FAILED at the first stage it
    did not finish; an MLflow run of the root's own SQLite registry still RUNNING (its process
    killed by SIGKILL or with the machine) is ended KILLED. A run whose driver still runs here
    had the lock taken from under it (its file removed): :class:`LockBusy`, nothing touched. One
    driven from another host is left alone, and so are the registry's runs then. A registry on a
    server is left alone: other roots' live runs may use it."""
    from components.common.run_record import RUN_RECORD, RunRecord

    said, live = [], []
    runs = root / "runs"
    for folder in sorted(runs.iterdir()) if runs.is_dir() else []:
        if folder.name == run_id or folder.is_symlink() or not (folder / RUN_RECORD).is_file():
            continue
        if (folder / SUMMARY).exists():
            continue
        state = driver_state(folder)
        if state == RUNNING:  # it holds the lock, or did until its file was removed under it
            pid = read_record(folder / DRIVER).get("pid")
            raise LockBusy(
                f"run {folder.name} is still running here (pid {pid}) although {lock_path(root)} "
                "did not say so (was it removed?): wait for it to finish or stop it"
            )
        if state == ELSEWHERE:  # cannot be looked at from here: never declared dead on a guess
            live.append(folder.name)
            continue
        why = f"the run ended without a summary (its process was killed); closed by run {run_id}"
        record = RunRecord.find(folder)  # what the exit handler would have read
        summary = RunSummary.build(
            folder,
            record.data_dir if record else "",
            record.raw_uri if record else "",
            "",
            folder.name,
            FAILED,
            why,
        )
        summary.write(folder)
        shutil.rmtree(folder / "kfp" / "tmp", ignore_errors=True)  # what its tasks left in TMPDIR
        said.append(
            f"run {folder.name} ended without a summary (killed in {summary.failed_stage}): "
            "recorded FAILED"
        )
    db = runs / "mlflow.db"
    if live:
        said.append(
            f"run(s) {', '.join(live)} without a summary, driven from another host: left as they "
            "are, and so are the registry's open MLflow runs"
        )
    elif not tracking_uri and db.is_file():
        said += _end_running_mlflow_runs(db)
    for line in said:
        print(f"dailyrec: {line}", flush=True)
    return said


def _running_mlflow_runs(db: Path) -> list[tuple[str, str, str]]:
    """``(run id, name, experiment)`` of each run the SQLite registry ``db`` has RUNNING; none
    when it holds no runs table (not a registry, or not yet).

    Looked up writable (``mode=rw``, never creating the file): a process killed in the middle of
    a write leaves a hot journal that only a writer may roll back, and a read-only connection
    fails on it ("attempt to write a readonly database"). A registry this user may only read is
    looked up read-only."""
    import sqlite3

    query = (
        "select r.run_uuid, r.name, e.name from runs r join experiments e "
        "on r.experiment_id = e.experiment_id where r.status = 'RUNNING'"
    )
    for mode in ("rw", "ro"):
        try:
            uri = f"{db.as_uri()}?mode={mode}"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
                return conn.execute(query).fetchall()
        except sqlite3.Error:  # not writable here, no runs table yet, or not a registry
            continue
    return []


def _end_running_mlflow_runs(db: Path) -> list[str]:
    """End KILLED every run of the SQLite registry ``db`` still RUNNING (looked up with sqlite3
    first: MLflow is only started when there is something to end)."""
    left = _running_mlflow_runs(db)
    if not left:
        return []
    from mlflow import MlflowClient

    client = MlflowClient(sqlite_uri(db.parent))
    said = []
    for run_uuid, name, experiment in left:
        try:
            client.set_terminated(run_uuid, "KILLED")
        except Exception as exc:  # e.g. a registry this user may not write: say it, run anyway
            said.append(f"MLflow run {name} ({experiment}) is left RUNNING: cannot end it ({exc})")
            break
        said.append(
            f"MLflow run {name} ({experiment}) was left RUNNING by a killed run: ended KILLED"
        )
    return said


def check_folders(root: Path, run_id: str) -> None:
    """Refuse, before anything is written, a ``runs/``, ``datasets/`` or run folder that leads
    outside the storage root (a symlink): the lock, the parameters and the logs would land there."""
    for folder, what in (
        (root / "runs", "runs folder"),
        (root / "datasets", "datasets folder"),
        (run_dir(root, run_id), "run folder"),
    ):
        inside(root, folder, what)


@contextlib.contextmanager
def local_run(
    params: dict, root: Path, run_id: str | None = None, engine: str | None = None
) -> Iterator[tuple[str, Path, dict]]:
    """A local run of any dailyrec pipeline, for the duration of the block: its parameters checked, the
    storage root's lock held (another run there: :class:`LockBusy`), its folder and KFP's local runner set
    up (``engine``: tasks in containers of that engine). Yields (run id, run folder, the parameters to
    call the pipeline with)."""
    run_id = resolve_run_id(params, run_id)
    check_parameters({**params, "run_id": run_id})
    root.mkdir(parents=True, exist_ok=True)
    check_folders(root, run_id)
    with storage_lock(root, run_id, stage="local run") as held, orphan_watchdog(held["token"]):
        close_dead_runs(root, run_id, params.get("tracking_uri") or "")
        if engine is None:
            yield start_local_run(params, root, run_id)
            return
        from pipelines.task_containers import docker_api, exit_codes_kept, group_writable

        with docker_api(engine), group_writable(), exit_codes_kept():
            yield start_local_run(params, root, run_id, containers=True)


def start_local_run(
    params: dict, root: Path, run_id: str, containers: bool = False
) -> tuple[str, Path, dict]:
    """Run folder, KFP's local runner and the storage parameters of a local run (under :func:`local_run`);
    ``containers``: the tasks see the storage root at the cluster's mount path."""
    import warnings

    from kfp import local

    # cluster-only settings and the cluster image name: expected here, not worth a warning per task
    warnings.filterwarnings("ignore", message=".*have no effect in the current local runner")
    warnings.filterwarnings("ignore", message=".*custom or non-Python base image")

    run_id = safe_name(run_id, "run id")
    folder = run_dir(root, run_id)
    # the storage lock is ours for the whole run: no other run can be using the folder, so the
    # claim of an earlier run killed before its summary is stale
    (folder / OWNER).unlink(missing_ok=True)
    kfp_dir = folder / "kfp"
    tmp = kfp_dir / "tmp"
    for made in (
        tmp,
        kfp_dir / "outputs",
        kfp_dir / "workspace",
    ):  # here, not by the engine's mounts
        made.mkdir(parents=True, exist_ok=True)
    record_driver(folder)
    # KFP deletes workspace_root after a run and leaves temp dirs behind: all of it under the run
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None
    raw = params.get("raw_uri") or str(root / "raw")
    raw = str(Path(raw).resolve()) if "://" not in raw else raw
    tracking = params.get("tracking_uri") or ""
    if containers:
        from kube.types import MOUNT_PATH
        from pipelines.task_containers import RAW_MOUNT, share_storage, task_runner

        remote = bool(tracking) or "://" in raw
        runner = task_runner(root, raw, run_id, share_storage(root), network=remote)
        root_seen, raw_seen = Path(MOUNT_PATH), raw if "://" in raw else RAW_MOUNT
    else:
        runner = local.SubprocessRunner(use_venv=False)
        root_seen, raw_seen = root, raw
    params = {
        **params,
        "storage_root": str(root_seen),
        "run_id": run_id,
        "raw_uri": raw_seen,
        "tracking_uri": tracking or sqlite_uri(root_seen / "runs"),
    }
    atomic_write_json(folder / "parameters.json", params)
    local.init(
        runner=runner,
        pipeline_root=str(kfp_dir / "outputs"),
        workspace_root=str(kfp_dir / "workspace"),
        raise_on_error=False,
    )
    return run_id, folder, params


def parameters_help(pipeline=None) -> str:
    """The pipeline's parameters as ``--help`` lists them: name, type, default and the description its
    docstring declares (the same text the Kubeflow UI shows)."""
    if pipeline is None:
        from pipelines.daily import daily as pipeline

    try:  # what `make run` uses, where it differs from the cluster default
        local = json.loads((Path(__file__).resolve().parents[1] / DEFAULT_CONFIG).read_text())
    except (OSError, ValueError):
        local = {}
    lines = ["pipeline parameters (set them in --config's JSON file or with --set KEY=VALUE):"]
    for name, spec in pipeline.component_spec.inputs.items():
        default = "" if spec.default is None else spec.default
        here = (
            f"; {DEFAULT_CONFIG}: {json.dumps(local[name])}"
            if name in local and local[name] != default
            else ""
        )
        lines.append(f"  {name} ({spec.type}, default {json.dumps(default)}{here})")
        lines.append(f"      {spec.description or ''}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    """make run's command line."""
    p = cli_parser("python -m pipelines.local", __doc__.splitlines()[0], epilog=parameters_help())
    p.add_argument("--config", default=DEFAULT_CONFIG, help="JSON file of pipeline parameters")
    p.add_argument(
        "--data",
        default=None,
        help="raw events folder (dt=YYYY-MM-DD/ in the raw contract); default: raw_uri, else ROOT/raw",
    )
    p.add_argument("--root", default=".", help="storage root: datasets/ and runs/ go here")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a parameter of --config (repeatable)",
    )
    p.add_argument(
        "--run-id",
        default=None,
        help="folder name of the run under ROOT/runs; default: the run_id parameter, else a new id",
    )
    p.add_argument(
        "--runner",
        choices=RUNNERS,
        default="subprocess",
        help="where the tasks run: subprocesses of this environment, or containers of --image "
        "(docker or podman, whichever answers)",
    )
    p.add_argument(
        "--image",
        default=LOCAL_IMAGE,
        help=f"runtime image of --runner docker (default {LOCAL_IMAGE}: make images)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="print everything KFP's runner prints (the executor JSON, every task's full log)",
    )
    return p


def _checked_parameters(args: argparse.Namespace) -> dict:
    """The run's parameters (--config, --set, --data), checked as the pipeline types them, and
    the raw folder there: a bad request fails here, before anything runs."""
    overrides = set_overrides(args.set)
    if args.data:
        overrides["raw_uri"] = args.data
    params = load_config(args.config, overrides)
    if args.run_id is not None:
        safe_name(args.run_id, "run id")  # (run_local checks it too) before the folder check
    check_parameters({**params, "run_id": resolve_run_id(params, args.run_id)})
    raw = params.get("raw_uri") or str(Path(args.root) / "raw")
    if "://" not in raw and not Path(raw).is_dir():  # fail now, not minutes into the pipeline
        raise LocalRunError(f"raw events folder {raw} does not exist (--data or raw_uri)")
    return params


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from pipelines.task_containers import ContainerRunError

    try:
        params = _checked_parameters(args)
    except (LocalRunError, ValueError) as exc:
        print(f"run: error: {exc}", file=sys.stderr)
        return Exit.USAGE  # checked before anything runs: a LocalRunError here is a bad request
    try:
        with stop_tree_on_signals():
            summary = run_local(
                params, args.root, args.run_id, args.verbose, args.runner, args.image
            )
    except Stopped as exc:
        print(f"run: {exc}: every task process was stopped", file=sys.stderr)
        return signal_exit(exc.signum)
    except (LocalRunError, ContainerRunError) as exc:  # no engine, no image, no engine API
        print(f"run: error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except (LockBusy, PathError) as exc:
        print(f"run: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except OSError as exc:  # e.g. a --root that cannot be created
        print(f"run: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    print("\n" + summary.text())
    print(
        f"  wall     {summary.wall_seconds:.0f}s  summary: {Path(args.root) / 'runs' / summary.run_id / SUMMARY}"
    )
    print(
        f"  logs     {summary.logs}/ (<task>.log per task, pipeline.log: the KFP runner's transcript)"
    )
    return Exit.OK if summary.succeeded else Exit.FAILED


if __name__ == "__main__":
    sys.exit(main())
