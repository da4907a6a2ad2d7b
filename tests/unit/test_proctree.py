"""A stop (SIGTERM) waits for the end of a section that must not be cut in half, and reaches the
main code even when Python's signal handler runs where exceptions
are swallowed (a weakref callback, a ``__del__``): each case runs in its own process, which then
blocks in a read no one will ever answer, as a trainer does on a queue a killed data loader worker
left half written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tools import ROOT

CASE = """
import os, signal, sys, time, weakref
from components.common.proctree import Stopped, stop_tree_on_signals

class Thing:
    def __del__(self):
        {in_del}

def stop_me(_=None):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0)  # a call: Python runs the handler here, inside the callback

before = sys.unraisablehook
try:
    with stop_tree_on_signals():
        thing = Thing()
        {setup}
        del thing
        {after}
        read_end, _write_end = os.pipe()
        os.read(read_end, 1)  # nothing ever comes
except Stopped as exc:
    print("main code:", exc, "| hook restored:", sys.unraisablehook is before)
"""


def run_script(code: str) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()  # a lost stop ignores SIGTERM from then on
        out, err = proc.communicate()
        pytest.fail(f"the stop was lost: the process hung\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_case(in_del: str = "pass", setup: str = "pass", after: str = "pass"):
    return run_script(CASE.format(in_del=in_del, setup=setup, after=after))


@pytest.mark.parametrize(
    "where",
    [
        pytest.param({"setup": "_ref = weakref.ref(thing, stop_me)"}, id="weakref-callback"),
        pytest.param({"in_del": "stop_me()"}, id="__del__"),
    ],
)
def test_a_stop_python_swallows_still_reaches_the_main_code(where):
    done = run_case(**where)
    assert done.stdout.strip() == "main code: stopped by SIGTERM | hook restored: True", done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_other_swallowed_errors_are_reported_as_before():
    """Only a stop is taken over: any other error in a ``__del__`` still reaches the previous
    hook (Python's report), and a stop afterwards still ends the block."""
    done = run_case(in_del="raise ValueError('in __del__')", after="stop_me()")
    assert "Exception ignored" in done.stderr and "ValueError: in __del__" in done.stderr
    assert done.stdout.strip() == "main code: stopped by SIGTERM | hook restored: True", done.stderr


DEFERRED = """
import os, signal, time
from components.common.proctree import Stopped, stop_deferred, stop_tree_on_signals

try:
    with stop_tree_on_signals():
        with stop_deferred():
            with stop_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
            print("inner section finished")
            time.sleep(0.2)
            print("outer section finished")
        print("not reached")
except Stopped as exc:
    print("then:", exc)
"""


def test_a_stop_waits_for_the_end_of_a_deferred_section():
    """A write to the tracking store is not cut in half (the run's KILLED status must be written
    after it, to the same store): the stop is raised where the outermost section ends."""
    done = run_script(DEFERRED)
    assert done.stdout.splitlines() == [
        "inner section finished",
        "outer section finished",
        "then: stopped by SIGTERM",
    ], done.stderr
