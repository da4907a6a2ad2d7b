"""Started in every Python process of a recorded benchmark run (``python -m benchmarks.record``
puts this folder first on ``sys.path`` through a ``.pth`` file): notes each repository module
the process imports.

Each import of a ``components``/``pipelines``/``kube``/``benchmarks``/``tests`` module is
appended to ``$DAILYREC_LOADED_DIR/<pid>.txt`` as it happens, so a process killed mid-run
still leaves what it had loaded; at a normal exit the process adds every such module in
``sys.modules`` by file (what an import hook ahead of this one, such as pytest's, loaded).
Without ``$DAILYREC_LOADED_DIR`` it does nothing. A ``sitecustomize`` this one shadows (a
distribution's own) still runs.
"""

from __future__ import annotations

import atexit
import os
import sys

_FOLDER = os.environ.get("DAILYREC_LOADED_DIR")
_PACKAGES = ("components", "pipelines", "kube", "benchmarks", "tests")


class _Recorder:
    """A meta path finder that finds nothing: it only writes down what is asked for."""

    def __init__(self, path: str):
        self._path = path
        self._seen: set[str] = set()

    def note(self, line: str) -> None:
        if line in self._seen:
            return
        self._seen.add(line)
        try:
            with open(self._path, "a") as out:  # one short write: a kill leaves whole lines
                out.write(line + "\n")
        except OSError:
            pass  # the run's folder is gone: it no longer records

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in _PACKAGES:
            self.note("module " + fullname)
        return None

    def at_exit(self) -> None:
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                self.note("file " + os.path.abspath(file))


def _chain() -> None:
    """Run the ``sitecustomize`` this file shadows, if the interpreter has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(entry or os.getcwd()) != here and os.path.isfile(candidate):
            import runpy

            runpy.run_path(candidate, run_name="sitecustomize")
            return


if _FOLDER and os.path.isdir(_FOLDER):
    _recorder = _Recorder(os.path.join(_FOLDER, f"{os.getpid()}.txt"))
    sys.meta_path.insert(0, _recorder)
    atexit.register(_recorder.at_exit)
_chain()
