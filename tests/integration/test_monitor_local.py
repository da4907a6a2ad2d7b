"""make monitor and make dashboard as a user runs them: Prometheus with the project's rules and a
Pushgateway that a run's outcome reaches, stopped with make; the dashboard's panels as PNGs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from components.common.monitoring import push_run_outcome
from pipelines.monitor import PLOTS, TOOLS, read_runs
from pipelines.tune import TUNE_RUN_FORMAT
from tests.run_records import decision, summary
from tests.tools import ROOT, missing, start_make, user_env

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def test_make_monitor_shows_a_run_and_stops_with_make(tmp_path):
    for tool in TOOLS:
        if shutil.which(tool) is None:
            missing(tool, "apt-get install prometheus prometheus-pushgateway (make test-tools)")
    prometheus, gateway = free_port(), free_port()
    log = tmp_path / "make-monitor.log"
    make = start_make(
        "monitor",
        f"ROOT={tmp_path}",
        f"PROMETHEUS_PORT={prometheus}",
        f"PUSHGATEWAY_PORT={gateway}",
        log=log,
    )
    try:
        deadline = time.monotonic() + 120
        while "Ctrl-C stops both" not in log.read_text():
            if make.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"make monitor did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        # the line it prints is what a run needs
        url = re.search(r"DAILYREC_PUSHGATEWAY=(\S+)", log.read_text())[1]
        assert url == f"http://127.0.0.1:{gateway}"
        assert push_run_outcome(summary("FAILED", test_auc=None, run_folder=tmp_path / "r"), url)
        fired, deadline = set(), time.monotonic() + 60
        while "DailyrecRunFailed" not in fired and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{prometheus}/api/v1/alerts") as r:
                alerts = json.loads(r.read())["data"]["alerts"]
            fired = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
            time.sleep(1)
        assert "DailyrecRunFailed" in fired  # the project's rules, on what the run pushed
        make.send_signal(signal.SIGTERM)  # to make alone, as `kill <pid>` does
        make.wait(timeout=60)
        deadline = time.monotonic() + 30
        ends = (f"http://127.0.0.1:{prometheus}/-/ready", f"http://127.0.0.1:{gateway}/-/ready")
        while any(answers(end) for end in ends):
            if time.monotonic() > deadline:
                pytest.fail("Prometheus or the Pushgateway outlived make")
            time.sleep(0.5)
        state = tmp_path / "runs" / "monitor"
        assert (state / "prometheus.yml").is_file() and (state / "tsdb").is_dir()
    finally:
        if make.poll() is None:
            make.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)


def make_dashboard(root) -> subprocess.CompletedProcess:
    """``make dashboard ROOT=root`` from a plain shell."""
    return subprocess.run(
        ["make", "--no-print-directory", "dashboard", f"ROOT={root}"],
        cwd=ROOT,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_run(root, run_id: str, **kwargs) -> None:
    folder = root / "runs" / run_id
    record = summary(run_folder=folder, **kwargs)
    dataclasses.replace(record, run_id=run_id, run_date=run_id[:10]).write(folder)


def test_make_dashboard_draws_the_panels_from_the_runs_summaries(tmp_path):
    write_run(tmp_path, "2026-01-14-a")
    time.sleep(0.05)  # runs are ordered by when their summary was written
    decision(tmp_path / "runs" / "2026-01-15-b", champion_auc=0.71)
    write_run(tmp_path, "2026-01-15-b", test_auc=0.705, measured=7000.0)
    time.sleep(0.05)
    write_run(tmp_path, "2026-01-16-c", status="FAILED", test_auc=None)
    (tmp_path / "runs" / "2026-01-17-d").mkdir()  # a run still going: no summary yet
    latest = tmp_path / "runs" / "latest"  # make run's copy of the newest: drawn once
    latest.mkdir()
    shutil.copyfile(tmp_path / "runs" / "2026-01-16-c" / "summary.json", latest / "summary.json")
    tune = tmp_path / "runs" / "tune-1"  # a search's run: not a daily run to draw
    tune.mkdir()
    (tune / "summary.json").write_text(
        json.dumps({"format": TUNE_RUN_FORMAT, "run_id": "tune-1", "status": "SUCCEEDED"})
    )
    runs = read_runs(tmp_path)
    assert [r.run_id for r in runs] == ["2026-01-14-a", "2026-01-15-b", "2026-01-16-c"]
    # the values the exit handler pushes for each run
    assert runs[1].test_auc == 0.705 and runs[1].champion_test_auc == 0.71
    assert runs[1].tolerance == 0.002 and runs[0].champion_test_auc is None
    assert runs[2].succeeded is False and runs[2].stage_seconds["register"] is None
    assert runs[1].samples_per_second == 7000.0 and runs[1].gate == pytest.approx(0.708)
    done = make_dashboard(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = tmp_path / "runs" / "dashboard"
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert str(out / name) in done.stdout


def test_a_dashboard_without_runs_says_what_to_do(tmp_path):
    done = make_dashboard(tmp_path)
    assert done.returncode != 0
    assert f"monitor: error: no runs/*/summary.json under {tmp_path}: make run first" in done.stderr
    assert "Traceback" not in done.stderr
