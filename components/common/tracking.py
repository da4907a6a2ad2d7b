"""MLflow connection shared by train, evaluate and register.

* bounded retries with backoff, then one clear :class:`TrackingError`
  (MLflow's own HTTP retries would otherwise take minutes to give up);
* a SQLite tracking URI keeps its artifacts beside the database, not in
  ``./mlruns`` of whatever folder the process happens to run in;
* credentials never travel in a URI: one with ``user:password@`` (or a
  token in its query) is refused (:func:`check_no_credentials`), and any URI
  that reaches a log line or an error message is redacted first. MLflow reads
  ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (or
  ``MLFLOW_TRACKING_TOKEN``) from the environment: a Kubernetes Secret on the
  cluster, the shell locally;
* a new SQLite database is created and migrated under a temporary name and
  renamed into place, so an interrupted first run never leaves a half-migrated
  one; a damaged one is named with what to do;
* a local registry folder can move: its artifact locations are rewritten to
  the new place on the next connection (:func:`relocate_sqlite`; `make ui` too);
  the same folder seen through another path (a bind mount, a symlink) is left
  as it is, so two paths never flip it back and forth;
* KFP's MLflow plugin (2.17, ``injectUserEnvVars``) gives each task an MLflow run of its own
  through ``$MLFLOW_RUN_ID`` (with ``$MLFLOW_EXPERIMENT_ID`` and its server's
  ``$MLFLOW_TRACKING_URI``), which ``mlflow.start_run`` would resume: our runs would land in
  KFP's per-task run, outside our experiments, or fail on another server. :func:`connect` takes
  those variables out of the process first (:func:`injected_run`); our runs stay in our
  experiments and name KFP's run as their parent when it lives on the same server
  (:func:`parent_tags`), else record where it lives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

import components
from components.common.progress import get_logger

log = get_logger(__name__)

# Fail fast on a dead server; our own loop below does the retrying with backoff.
_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}


class TrackingError(RuntimeError):
    """The tracking server or registry cannot be used; the message says which URI and why."""


class CredentialError(ValueError):
    """A URI that carries credentials; they belong in the environment."""


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@?#\s]*)@")
_PARAMETER = re.compile(r"(?P<lead>[?&#;](?P<name>[^=&#;?/\s]+)=)(?P<value>[^&#;\s]*)")
_SECRET_WORDS = ("token", "passw", "secret", "signature", "credential", "private", "apikey")
"""A parameter whose name holds one of these is a secret (``access_token``, ``X-Amz-Signature``)."""
_SECRET_PARTS = {"sig", "pwd", "pass", "auth", "key", "jwt", "bearer", "session", "sessionid"}
"""... or one of these as a whole part of its name (``sig``, ``api-key``, ``jsessionid`` aside)."""


def _secret_name(name: str) -> bool:
    lower = name.lower()
    parts = set(re.split(r"[_.-]", lower))
    return (
        any(w in lower for w in _SECRET_WORDS)
        or bool(parts & _SECRET_PARTS)
        or lower.endswith("sessionid")
    )


_SECRET_SHAPES = re.compile(
    # values that are secrets whatever their name: a JSON web token, an AWS access key id, a
    # GitHub or Slack token, a PEM block
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|"
    r"\bgh[pousr]_[A-Za-z0-9]{30,}|\bxox[abprs]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY"
)


def redact(text: str) -> str:
    """``text`` with the userinfo of every URI, secret-named query and fragment values and
    secret-shaped values (tokens, access keys) replaced by ``***``."""
    text = _USERINFO.sub(r"\g<scheme>***@", text)
    text = _PARAMETER.sub(lambda m: m["lead"] + "***" if _secret_name(m["name"]) else m[0], text)
    return _SECRET_SHAPES.sub("***", text)


def carries_credentials(uri: str) -> bool:
    """Whether ``uri`` holds a credential: userinfo, a secret-named parameter of its query or
    fragment, or a value shaped like a token or an access key."""
    if not uri:
        return False
    named = any(_secret_name(m["name"]) for m in _PARAMETER.finditer(uri))
    return named or bool(_USERINFO.search(uri) or _SECRET_SHAPES.search(uri))


def check_no_credentials(uri: str, what: str = "tracking_uri") -> str:
    """``uri`` unchanged, or :class:`CredentialError` (with the URI redacted) when it carries credentials."""
    if carries_credentials(uri):
        raise CredentialError(
            f"{what}: {redact(uri)} carries credentials; they would be written to parameters, logs and "
            f"process lists. Pass the URI without them and set MLFLOW_TRACKING_USERNAME and "
            f"MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment: a Kubernetes "
            f"Secret on the cluster (see docs/pipeline.md, Credentials)"
        )
    return uri


INJECTED_VARIABLES = ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME")
"""What KFP's MLflow plugin sets for a task's own run; ``mlflow.start_run`` obeys the first two."""
PARENT_TAG = "mlflow.parentRunId"
"""MLflow's tag naming a run's parent (what ``start_run(parent_run_id=...)`` writes)."""
KFP_RUN_TAG = "dailyrec.kfp_mlflow_run"
"""The run KFP's plugin made for the task: ``<its server, redacted>#<run id>``."""


@dataclasses.dataclass(frozen=True)
class InjectedRun:
    """The MLflow run KFP's plugin made for this task, and the server it lives on."""

    run_id: str
    tracking_uri: str


_injected: list[InjectedRun | None] = []
"""The run :func:`injected_run` took out of the environment (empty: not looked yet)."""


def injected_run(environ: dict | None = None) -> InjectedRun | None:
    """KFP's per-task run, taken out of the environment the first time (so that no
    ``mlflow.start_run`` of this process, or a child started later, resumes it); the same
    answer every later call."""
    if not _injected:
        env = os.environ if environ is None else environ
        run_id = env.get("MLFLOW_RUN_ID", "").strip()
        uri = env.get("MLFLOW_TRACKING_URI", "").strip()
        for name in INJECTED_VARIABLES:
            env.pop(name, None)
        _injected.append(InjectedRun(run_id, uri) if run_id else None)
    return _injected[0]


def parent_tags(tracking_uri: str) -> dict[str, str]:
    """Tags of one of our runs naming KFP's per-task run: where it lives, and as the parent when
    it lives on ``tracking_uri`` (a parent on another server would point nowhere)."""
    run = injected_run()
    if run is None:
        return {}
    tags = {KFP_RUN_TAG: f"{redact(run.tracking_uri) or 'this server'}#{run.run_id}"}
    if run.tracking_uri in ("", tracking_uri):
        tags[PARENT_TAG] = run.run_id
    return tags


def sqlite_uri(folder: str | Path) -> str:
    """The default local tracking URI: ``sqlite:///<folder>/mlflow.db`` (absolute)."""
    return f"sqlite:///{(Path(folder).resolve() / 'mlflow.db').as_posix()}"


def default_tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite registry under ./runs (where `make run` keeps it)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri("runs")


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI; None for any other URI."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///") :])


def artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """Where a new experiment keeps artifacts: beside a SQLite database; else the server decides."""
    db = sqlite_path(tracking_uri)
    if db is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment).strip("-") or "default"
    return (db.parent.resolve() / "artifacts" / slug).as_uri()


def connect(tracking_uri: str, attempts: int = 3, backoff_s: float = 1.0) -> Any:
    """An ``MlflowClient`` on ``tracking_uri`` that has answered one request.

    Retries ``attempts`` times with exponential backoff, then raises
    :class:`TrackingError`. Also makes it the process's tracking URI.
    """
    for key, value in _HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    try:
        check_no_credentials(tracking_uri)
        check_no_credentials(os.environ.get("MLFLOW_TRACKING_URI", ""), "$MLFLOW_TRACKING_URI")
    except CredentialError as exc:
        raise TrackingError(str(exc)) from None
    injected_run()  # before set_tracking_uri below overwrites the plugin's server
    import mlflow
    from mlflow import MlflowClient

    db = sqlite_path(tracking_uri)
    if db is not None and "?" in db.as_posix():
        raise TrackingError(
            f"{redact(tracking_uri)}: a SQLite registry's path cannot hold '?' (the database URL "
            f"would end there and MLflow open another file); use a folder without it"
        )
    if db is not None and (done := prepare_sqlite(db)) and not done.startswith("created"):
        log.warning("%s", done)
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    for attempt in range(1, attempts + 1):
        try:
            client.search_experiments(max_results=1)
            # only now: the fluent API (start_run, log_model) needs it, and MLflow
            # also exports it to child processes through $MLFLOW_TRACKING_URI
            mlflow.set_tracking_uri(tracking_uri)
            mlflow.set_registry_uri(tracking_uri)
            return client
        except Exception as exc:  # connection refused, DNS, HTTP 5xx, locked or corrupt database
            if db is not None and (problem := sqlite_problem(db)):
                raise TrackingError(problem) from exc
            if attempt == attempts:
                raise TrackingError(
                    f"MLflow tracking at {redact(tracking_uri)} unusable after "
                    f"{attempts} attempts: {type(exc).__name__}: "
                    f"{redact(str(exc))[:300]}"
                ) from exc
            wait = backoff_s * 2 ** (attempt - 1)
            log.warning(
                "MLflow tracking at %s failed (%s); retrying in %.0fs",
                redact(tracking_uri),
                type(exc).__name__,
                wait,
            )
            time.sleep(wait)
    raise AssertionError("unreachable")


def _schema_head() -> str:
    """The Alembic revision a complete MLflow database of the installed MLflow is at."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    return ScriptDirectory.from_config(_get_alembic_config("sqlite://")).get_current_head()


def _readonly(db: Path) -> str:
    """A SQLite URI that opens ``db`` read-only, the path quoted (``?``, ``#``, ``%`` in a folder
    name would otherwise end the name early and drop ``mode=ro`` with it)."""
    return f"{db.resolve().as_uri()}?mode=ro"


def _schema_of(db: Path) -> tuple[str | None, int]:
    """``(alembic revision or None, tables)`` of a SQLite file, read without SQLAlchemy."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(_readonly(db), uri=True)) as con:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        if "alembic_version" not in tables:
            return None, len(tables)
        row = con.execute("select version_num from alembic_version").fetchone()
        return (row[0] if row else None), len(tables)


def sqlite_problem(db: Path) -> str | None:
    """What is wrong with an existing MLflow SQLite file, as one line with what to do; None when sound."""
    import sqlite3

    try:
        revision, tables = _schema_of(db)
    except sqlite3.DatabaseError as exc:
        if _journal(db).is_file():  # a writer killed mid-write: only a writer may roll it back
            return (
                f"{db}: a write to it was cut by a kill (its journal {_journal(db).name} is beside "
                f"it) and a read-only look cannot roll it back: run `python -m "
                f"components.common.tracking {db}` (or the next `make run`) as a user who may write "
                f"it, which rolls the cut write back"
            )
        return (
            f"{db}: not a usable SQLite database ({exc}); move it aside (it is not the registry any more) "
            f"and rerun to start a new one, or restore it from a backup"
        )
    head = _schema_head()
    if revision is None:
        return (
            f"{db}: an incomplete MLflow database ({tables} tables, no schema version: its creation was "
            f"interrupted); move it aside and rerun to create a new one"
        )
    if revision != head:
        return (
            f"{db}: MLflow schema at revision {revision}, this MLflow needs {head}: back it up, then run "
            f"`mlflow db upgrade sqlite:///{db}` (an interrupted migration: restore the backup first)"
        )
    return None


def _journal(db: Path) -> Path:
    """The rollback journal SQLite keeps beside ``db`` while a write is under way."""
    return db.with_name(db.name + "-journal")


def roll_back_cut_write(db: Path) -> str | None:
    """Roll back a write a kill cut short (a hot journal beside ``db``) by opening ``db`` writable
    once, never creating it; what was done, or None when there was nothing to roll back or this
    user may not write it."""
    import sqlite3

    if not _journal(db).is_file():
        return None
    try:
        uri = f"{db.resolve().as_uri()}?mode=rw"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as con:
            con.execute("select count(*) from sqlite_master").fetchone()  # a reader rolls back
    except sqlite3.Error:
        return None
    return None if _journal(db).is_file() else f"{db}: rolled back a write a kill had cut short"


def _holds_data(db: Path) -> bool:
    """Whether a SQLite file holds anything of the registry's (runs, experiments beyond the default,
    registered models, model versions, logged models); True when it cannot even be read."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(_readonly(db), uri=True)) as con:
            tables = {
                r[0] for r in con.execute("select name from sqlite_master where type = 'table'")
            }
            checks = {
                "runs": "select count(*) from runs",
                "registered_models": "select count(*) from registered_models",
                "model_versions": "select count(*) from model_versions",
                "logged_models": "select count(*) from logged_models",
                "experiments": "select count(*) from experiments where experiment_id != 0",
            }
            return any(
                con.execute(query).fetchone()[0]
                for table, query in checks.items()
                if table in tables
            )
    except sqlite3.DatabaseError:
        return True


def repair_sqlite(db: Path) -> str | None:
    """An incomplete database that holds nothing (its creation was interrupted) is moved aside as
    ``<db>.incomplete-<time>`` and created again; returns what was done, None when nothing was."""
    problem = sqlite_problem(db)
    if problem is None or "incomplete" not in problem or _holds_data(db):
        return None
    aside = db.with_name(f"{db.name}.incomplete-{time.strftime('%Y%m%dT%H%M%S')}")
    os.replace(db, aside)
    ensure_sqlite(db)
    return f"{db} was an incomplete, empty MLflow database (interrupted creation): moved to {aside.name}, created anew"


def ensure_sqlite(db: Path) -> None:
    """Create the MLflow database at ``db`` atomically when absent: migrated under a temp name, then linked
    into place (a concurrent creator's database wins; ours is dropped). An existing one is left as is."""
    db.parent.mkdir(parents=True, exist_ok=True)
    if db.exists():
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from components.common.storage import owned_temp

    with owned_temp(db) as tmp:
        try:
            store = SqlAlchemyStore(
                f"sqlite:///{tmp.as_posix()}", (db.parent / "artifacts").as_uri()
            )
            store.engine.dispose()
            with contextlib.suppress(
                FileExistsError
            ):  # another process got there first: keep theirs
                os.link(tmp, db)  # unlike rename, never replaces an existing file
        finally:
            tmp.unlink(missing_ok=True)


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""The experiment tag that says what an experiment holds (MLflow 3 infers GenAI without it). Its
UI keeps a switch of its own, GenAI or Model training, that starts on GenAI; the link ``make ui``
prints selects Model training (``?workflowType=machine_learning``)."""
EXPERIMENT_KIND = "custom_model_development"
"""The classic machine-learning view: runs, their metrics and charts, models."""
UI_VIEW = "workflowType=machine_learning"
"""The query that opens a page of MLflow's UI in its Model training view."""


def run_link(experiment_id: str, run_id: str) -> str:
    """The MLflow UI's page of a run (relative to the UI's address), in the Model training view."""
    return f"#/experiments/{experiment_id}/runs/{run_id}?{UI_VIEW}"


def ensure_experiment(client: Any, name: str, tracking_uri: str) -> str:
    """The id of experiment ``name``, created (artifacts beside a SQLite DB) when absent, and marked
    for MLflow's machine-learning view (:data:`EXPERIMENT_KIND`)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.tags.get(EXPERIMENT_KIND_TAG) is None:  # one made by an earlier version
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return found.experiment_id
    try:
        return client.create_experiment(
            name,
            artifact_location=artifact_location(tracking_uri, name),
            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
        )
    except Exception:  # created concurrently by another process: use theirs
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def dataset_input(data: str, fingerprint: str | None) -> Any:
    """A preprocessed dataset as an MLflow dataset (``mlflow.log_input``): named by its folder,
    with its fingerprint as the digest, so the runs that read the same window show the same
    dataset."""
    from mlflow.data.dataset_source_registry import get_registered_sources, resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    # a folder on local or shared storage; MLflow registers that kind of source twice and warns
    # on every resolution that it "can be interpreted in multiple ways" unless told which
    local = [s for s in get_registered_sources() if s.__name__ == "LocalArtifactDatasetSource"]
    return MetaDataset(
        resolve_dataset_source(str(Path(data).resolve()), candidate_sources=local[:1] or None),
        name=Path(data).name,
        digest=(fingerprint or "")[:16] or None,
    )


def code_version() -> str:
    """Package version + a short hash of every source file: what code produced a model."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("dailyrec")
    except PackageNotFoundError:
        package = "unknown"
    digest = hashlib.sha256()
    root = Path(components.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return f"{package}+{digest.hexdigest()[:12]}"


# Where a SQLite registry records absolute artifact locations (MLflow stores them as given).
_LOCATION_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
    ("logged_models", "artifact_location"),
)


def relocate_sqlite(db: Path) -> str | None:
    """Make a moved or copied local registry point at its own artifacts again.

    Artifacts live beside the database (``<folder>/artifacts``, see
    :func:`artifact_location`) but MLflow records their absolute ``file://``
    location; after the folder moves, every location is rewritten from the old
    folder to the new, in one transaction. Returns what was done (None: nothing to do).
    """
    import sqlite3

    here = db.parent.resolve()
    if not db.is_file() or not (here / "artifacts").is_dir():
        return None
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        tables = {
            name for (name,) in conn.execute("select name from sqlite_master where type='table'")
        }
        if "experiments" not in tables:
            return None
        old = None
        for (location,) in conn.execute("select artifact_location from experiments"):
            if location and location.startswith("file://") and "/artifacts/" in location:
                old = location[: location.rindex("/artifacts/")]
                break
        new = here.as_uri()
        if old is None or old == new or _same_folder(old, here / "artifacts"):
            return None
        with conn:  # one transaction: all locations move, or none
            for table, column in _LOCATION_COLUMNS:
                if table not in tables or column not in {
                    r[1] for r in conn.execute(f"pragma table_info({table})")
                }:
                    continue
                conn.execute(
                    f"update {table} set {column} = ? || substr({column}, ?) "  # noqa: S608 (fixed names)
                    f"where {column} like ? escape '\\'",
                    (
                        new + "/artifacts/",
                        len(old + "/artifacts/") + 1,
                        _like_prefix(old + "/artifacts/") + "%",
                    ),
                )
    return f"{db}: the registry moved from {old} to {new}; its artifact locations now point here"


def _same_folder(old_uri: str, artifacts: Path) -> bool:
    """Whether the recorded folder's ``artifacts`` is this one under another path (a second mount
    or a symlink): its locations still resolve, and rewriting them would flip the registry between
    its paths on every open."""
    from urllib.parse import unquote, urlparse

    recorded = Path(unquote(urlparse(old_uri).path)) / "artifacts"
    try:
        return os.path.samefile(recorded, artifacts)
    except OSError:  # gone, or not reachable from here: the registry did move
        return False


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def prepare_sqlite(db: Path) -> str | None:
    """Make ``db`` a sound MLflow database before a server opens it: created atomically when absent, a
    write cut by a kill rolled back, an interrupted empty creation repaired, a moved registry's artifact locations rewritten; returns what
    was done, or raises TrackingError with what to do."""
    if not db.exists():
        ensure_sqlite(db)
        return f"created {db}"
    rolled_back = roll_back_cut_write(db)
    repaired = repair_sqlite(db)
    problem = None if repaired else sqlite_problem(db)
    if problem:
        raise TrackingError(problem)
    done = [rolled_back, repaired or relocate_sqlite(db)]
    return "; ".join(line for line in done if line) or None


def main(argv: list[str] | None = None) -> int:
    """``python -m components.common.tracking DB``: prepare a local registry for ``mlflow ui``/``server``
    (``make ui``), which would otherwise create it non-atomically on first open, or show a moved
    registry's artifacts at their old place."""
    import sys

    from components.common.cli import Exit, cli_parser, exit_for

    parser = cli_parser(
        "python -m components.common.tracking",
        "Create (atomically), repair or relocate a local MLflow SQLite "
        "registry before a server opens it.",
    )
    parser.add_argument("db", help="the SQLite file, e.g. runs/mlflow.db (required)")
    args = parser.parse_args(argv)
    try:
        done = prepare_sqlite(Path(args.db).resolve())
    except TrackingError as exc:
        print(f"tracking: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except OSError as exc:  # e.g. a folder that cannot be created
        print(f"tracking: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    if done:
        print(done)
    return Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
