"""Run a benchmark and stamp its result with the code its processes loaded: its scope, as run.

    python -m benchmarks.record NAME -- COMMAND...     # what every `make bench-NAME` runs

``NAME`` names the results file the command writes (``NAME.json`` under benchmarks/results/). Before the command starts,
every file a stamp can name is digested as it is then, so an edit made during a long run is not
taken for measured. Every Python process the command starts (the benchmark, its
subprocesses, torchrun's ranks, kfp.local's tasks, pytest) notes the repository modules it
imports (``benchmarks/record_hook/sitecustomize.py``, put first on ``sys.path`` by a ``.pth``
file in the environment's site-packages, so a child that sets its own ``PYTHONPATH`` records
too). When the
command succeeds and has written ``NAME.json``, that file's ``code`` stamp becomes one over those
modules, the modules its benchmark runs out of a recorder's reach (inside containers:
``Scope.elsewhere``) and its data files, with the run's wall seconds. A change to a module no
process of the run loaded then leaves the result fresh (``benchmarks/fingerprint.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from benchmarks import fingerprint
from benchmarks.fingerprint import NOT_MEASURED, PACKAGES, ROOT, SCOPES

ENV = "DAILYREC_LOADED_DIR"
"""The folder each recorded process writes its ``<pid>.txt`` into."""
HOOK = Path(__file__).with_name("record_hook")
RECORDED = (*PACKAGES, "tests")
"""Top-level folders whose modules count as the measured code."""


PTH = "dailyrec-record.pth"
"""What puts the hook first on ``sys.path`` of every Python process of this environment whose
environment has ``$DAILYREC_LOADED_DIR``, whatever it sets ``PYTHONPATH`` to."""


def pth_line() -> str:
    return f"import os, sys; os.environ.get({ENV!r}) and sys.path.insert(0, {str(HOOK)!r})\n"


def install_hook(site_packages: Path | None = None) -> Path:
    """Write the ``.pth`` that loads the hook into this interpreter's site-packages (once; inert in
    every process without ``$DAILYREC_LOADED_DIR``)."""
    folder = site_packages or Path(sysconfig.get_paths()["purelib"])
    path = folder / PTH
    if not path.is_file() or path.read_text() != pth_line():
        # whole or not at all: every Python start of this environment reads it
        partial = path.with_name(f".{PTH}.{os.getpid()}")
        partial.write_text(pth_line())
        os.replace(partial, path)
    return path


def environment(folder: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the recorder switched on."""
    return {**(os.environ if base is None else base), ENV: str(folder)}


def snapshot(name: str) -> dict[str, str]:
    """{path: digest} of every tracked module of the repository and the ``name`` data files,
    as they are now."""
    listing = fingerprint._tracked(None)
    paths = [p for folder in RECORDED for p in listing(folder) if p.endswith(".py")]
    files = {p: text for p in paths if (text := fingerprint.working_tree(p)) is not None}
    files.update(fingerprint.data_files(name))
    files.update(fingerprint.elsewhere_files(name))
    return fingerprint.digests(files)


def _path_of(line: str) -> str | None:
    """The repository path a recorder line names, or None (a library, a name that is no module)."""
    kind, _, value = line.partition(" ")
    if kind == "module":
        return fingerprint._module_path(value, fingerprint.working_tree)
    if kind == "file":
        path = Path(value)
        if path.suffix == ".py" and path.is_relative_to(ROOT):
            return path.relative_to(ROOT).as_posix()
    return None


def _measured(path: str) -> bool:
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return (
        path.split("/")[0] in RECORDED
        and not path.startswith(HOOK.relative_to(ROOT).as_posix() + "/")
        and module not in NOT_MEASURED
    )


def loaded(folder: Path) -> set[str]:
    """The repository modules the recorded processes loaded, with their packages' ``__init__``."""
    paths: set[str] = set()
    for record in folder.glob("*.txt"):
        for line in record.read_text(errors="replace").splitlines():
            path = _path_of(line)
            if path is not None and _measured(path):
                paths.add(path)
    for path in list(paths):  # a package's __init__ runs before any of its modules
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            init = "/".join(parts[:i]) + "/__init__.py"
            if (ROOT / init).is_file():
                paths.add(init)
    return paths


def loaded_stamp(
    name: str, folder: Path, before: dict[str, str], changed: set[str], seconds: float
) -> dict:
    """The ``code`` stamp of a recorded run: what it loaded, as it was when the run started
    (``changed``: the files that differed from HEAD then: ``+changes`` when it loaded one)."""
    paths = (
        loaded(folder) | set(fingerprint.data_files(name)) | set(fingerprint.elsewhere_files(name))
    )
    now = {p: fingerprint.digest_now(p) for p in paths - set(before)}
    file_digests = {p: before.get(p) or now[p] for p in paths if before.get(p) or now.get(p)}
    commit = fingerprint._commit_of(sorted(file_digests), changed)
    return fingerprint.stamp_of(file_digests, "loaded", commit, seconds)


def restamp(results: Path, stamp: dict) -> None:
    """Replace the ``code`` stamp of ``results``, the rest of the file as it was written."""
    from components.common.storage import atomic_write_json

    atomic_write_json(results, {**json.loads(results.read_text()), "code": stamp})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = _parser().parse_args(argv[:split]), argv[split + 1 :]
    if not command:
        _parser().error("no command: python -m benchmarks.record NAME -- COMMAND...")
    results = Path(
        args.results or fingerprint.ROOT / "benchmarks" / "results" / f"{args.name}.json"
    )
    print(f"record: digesting the code before {args.name} runs", flush=True)
    before, changed = snapshot(args.name), fingerprint.changed_paths()
    install_hook()
    folder = Path(tempfile.mkdtemp(prefix=f"dailyrec-loaded-{args.name}-"))
    started = time.time()
    try:
        code = subprocess.call(command, env=environment(folder))
        if code != 0:
            return code
        if not results.is_file() or results.stat().st_mtime < started:
            print(f"record: {results} was not written by this run; its stamp is left as it is")
            return 0
        stamp = loaded_stamp(args.name, folder, before, changed, time.time() - started)
        restamp(results, stamp)
        static = len(fingerprint.scope_files(args.name))
        print(
            f"record: {results.name} stamped with the {len(stamp['files'])} files its run loaded "
            f"or read (the static import closure has {static})",
            flush=True,
        )
        return 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.record",
        description=__doc__.splitlines()[0],
        usage="python -m benchmarks.record NAME [--results PATH] -- COMMAND...",
    )
    p.add_argument("name", choices=sorted(SCOPES), help="the results file the command writes")
    p.add_argument(
        "--results", default=None, help="its path (default: benchmarks/results/NAME.json)"
    )
    return p


if __name__ == "__main__":
    sys.exit(main())
