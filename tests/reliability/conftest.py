"""Records what each reliability test tried and saw, for the Reliability table (docs/reliability.md).

``fault_report(category, fault, outcome)`` notes one row for the running
test; its pass/fail result is added when the test ends. With
``$DAILYREC_RELIABILITY_REPORT`` set (``make test-reliability`` does), the rows
are written there as JSON at the end of the session and
``tests/reliability/report.py`` turns them into that table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROWS: list[dict] = []
REPORT_ENV = "DAILYREC_RELIABILITY_REPORT"
CODE: dict = {}
"""The code the checks ran against (benchmarks/fingerprint.py), taken before the first check."""


@pytest.fixture
def fault_report(request):
    def record(category: str, fault: str, outcome: str) -> None:
        ROWS.append(
            {
                "test": request.node.nodeid,
                "category": category,
                "fault": fault,
                "outcome": outcome,
                "result": None,
            }
        )

    return record


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        result = "passed" if report.passed else ("skipped" if report.skipped else "FAILED")
        rows = [row for row in ROWS if row["test"] == item.nodeid and row["result"] is None]
        if not rows and result != "passed":
            # skipped (or failed) before it could say what it checks: still a row, never a gap
            rows = [skipped_row(item, report)]
            ROWS.append(rows[0])
        for row in rows:
            row["result"] = result


def skipped_row(item, report) -> dict:
    """A row for a test that ended before calling ``fault_report``: its module, docstring, why."""
    doc = (getattr(item.function, "__doc__", None) or "").strip().splitlines()
    reason = (
        report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else "error"
    )
    return {
        "test": item.nodeid,
        "category": item.module.__name__.rpartition(".")[2].removeprefix("test_"),
        "fault": doc[0] if doc else item.name,
        "outcome": str(reason).removeprefix("Skipped: "),
        "result": None,
    }


def pytest_sessionstart(session):
    if os.environ.get(REPORT_ENV):
        try:
            from benchmarks.fingerprint import stamp
        except ModuleNotFoundError:  # run outside the repository: the rows carry no stamp
            return
        CODE.update(stamp("reliability"))


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get(REPORT_ENV)
    if target and ROWS:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        report = {"code": CODE or None, "rows": ROWS}
        Path(target).write_text(json.dumps(report, indent=2) + "\n")
