"""Monitoring against the real thing: the trainer's /metrics, the exit handler's push to a Pushgateway,
and Prometheus evaluating manifests/monitoring/rules.yaml on what was pushed."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from components.common.monitoring import (
    RUN_METRICS,
    TRAINING_METRICS,
    TrainingMetrics,
    push_run_outcome,
)
from pipelines.monitor import Ports, prometheus_config
from tests.run_records import decision, summary

MONITORING = Path(__file__).resolve().parents[2] / "manifests" / "monitoring"
HOUR = 3600.0


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(
            f"{tool} not installed (Debian: apt-get install prometheus prometheus-pushgateway; "
            f"`make test-tools` does it where apt-get is available)"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def start(command: list[str], ready: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{command[0]} exited: {log.read_text()[-2000:]}")
        try:
            get(ready)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"{command[0]} not ready in 60 s: {log.read_text()[-2000:]}")


@pytest.fixture
def pushgateway(tmp_path):
    binary = need("prometheus-pushgateway")
    port = free_port()
    # Debian's build persists to /var/lib/prometheus/pushgateway.data by default: one file for
    # the whole machine, so each test run would start with what the last one pushed
    proc = start(
        [
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--persistence.file={tmp_path / 'pushgateway.data'}",
        ],
        f"http://127.0.0.1:{port}/-/ready",
        tmp_path / "pushgateway.log",
    )
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def prometheus(tmp_path, pushgateway):
    binary = need("prometheus")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    gateway = int(pushgateway.rsplit(":", 1)[1])
    # what make monitor runs (pipelines/monitor.py), scraping and evaluating every second
    config.write_text(
        yaml.safe_dump(prometheus_config(Ports(port, gateway, free_port()), interval="1s"))
    )
    proc = start(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        f"http://127.0.0.1:{port}/-/ready",
        tmp_path / "prometheus.log",
    )
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def pushed(gateway: str) -> dict[str, float]:
    """The Pushgateway's dailyrec samples: ``name{label=value,...}`` -> value (job, model, instance dropped)."""
    samples = {}
    for family in text_string_to_metric_families(get(f"{gateway}/metrics")):
        for s in family.samples:
            if s.name.startswith("dailyrec_"):
                assert s.labels["job"] == "dailyrec" and s.labels["model"] == "dailyrec"
                extra = ",".join(
                    f"{k}={v}"
                    for k, v in sorted(s.labels.items())
                    if k not in ("job", "model", "instance")
                )
                samples[s.name + (f"{{{extra}}}" if extra else "")] = s.value
    return samples


def firing(prometheus: str, expected: set[str], timeout: float = 30.0) -> set[str]:
    """The dailyrec alerts firing once they equal ``expected`` (or whatever fires at the timeout)."""
    deadline, names = time.monotonic() + timeout, set()
    while time.monotonic() < deadline:
        alerts = json.loads(get(f"{prometheus}/api/v1/alerts"))["data"]["alerts"]
        names = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
        if names == expected:
            return names
        time.sleep(0.5)
    return names


@pytest.mark.integration
def test_pushed_outcomes_and_the_alerts_prometheus_fires_on_them(tmp_path, pushgateway, prometheus):
    now = time.time()
    assert pushed(pushgateway) == {}  # a gateway of its own: nothing left by another run
    # a good run 37 h ago, nothing since: the model is stale
    assert push_run_outcome(
        summary(run_folder=decision(tmp_path / "a", 0.70)), pushgateway, now=now - 37 * HOUR
    )
    assert firing(prometheus, {"DailyrecNoSuccessfulRun"}) == {"DailyrecNoSuccessfulRun"}

    # today's run fails: its stage seconds are what ran, the last success time stays
    assert push_run_outcome(
        summary("FAILED", test_auc=None, run_folder=tmp_path / "b"), pushgateway, now=now
    )
    metrics = pushed(pushgateway)
    assert metrics["dailyrec_run_succeeded"] == 0
    assert metrics["dailyrec_run_last_success_timestamp_seconds"] == pytest.approx(now - 37 * HOUR)
    assert metrics["dailyrec_run_stage_seconds{stage=train}"] == 80.0
    assert (
        metrics["dailyrec_run_stage_seconds{stage=register}"]
        != metrics["dailyrec_run_stage_seconds{stage=register}"]
    )  # NaN
    assert (
        metrics["dailyrec_run_champion_test_auc"] != metrics["dailyrec_run_champion_test_auc"]
    )  # no stale AUC
    assert firing(prometheus, {"DailyrecNoSuccessfulRun", "DailyrecRunFailed"}) == {
        "DailyrecNoSuccessfulRun",
        "DailyrecRunFailed",
    }

    # a rerun succeeds, but below the champion by more than the tolerance and at a third of the plan
    folder = decision(tmp_path / "c", champion_auc=0.70)
    assert push_run_outcome(
        summary(test_auc=0.69, measured=3000.0, run_folder=folder), pushgateway, now=now
    )
    metrics = pushed(pushgateway)
    assert metrics["dailyrec_run_succeeded"] == 1 and metrics["dailyrec_run_blessed"] == 1
    assert metrics["dailyrec_run_last_success_timestamp_seconds"] == pytest.approx(now)
    assert (
        metrics["dailyrec_run_test_auc"] == 0.69
        and metrics["dailyrec_run_champion_test_auc"] == 0.70
    )
    assert (
        metrics["dailyrec_run_auc_tolerance"] == 0.002
        and metrics["dailyrec_run_champion_version"] == 3
    )
    assert metrics["dailyrec_run_rows{split=test}"] == 200
    assert metrics["dailyrec_run_train_samples_per_second"] == 3000.0
    assert metrics["dailyrec_run_planned_samples_per_second"] == 10000.0
    expected = {"DailyrecCandidateBelowChampion", "DailyrecTrainingThroughputLow"}
    assert firing(prometheus, expected) == expected

    # within the tolerance and at 60% of the plan: nothing fires
    assert push_run_outcome(
        summary(test_auc=0.6985, measured=6000.0, run_folder=folder), pushgateway, now=now
    )
    assert firing(prometheus, set()) == set()


def test_a_push_never_fails_the_run(tmp_path, caplog):
    port = free_port()  # nothing listens there
    with caplog.at_level("WARNING", logger="components"):
        assert push_run_outcome(summary(), f"http://127.0.0.1:{port}") is False
        assert push_run_outcome(summary(), "http://user:secret@127.0.0.1:9091") is False
    assert "run outcome not pushed to http://127.0.0.1:" in caplog.text
    assert "secret" not in caplog.text and "carries credentials" in caplog.text
    assert push_run_outcome(summary(), None) is False  # not configured: nothing to do


@pytest.mark.integration
def test_rank_0_serves_training_progress_while_it_trains(tiny_dataset, tmp_path, monkeypatch):
    from components.common.plan import TrainPlan, write_plan
    from components.train.trainer import TrainConfig, train

    port = free_port()
    monkeypatch.setenv("DAILYREC_METRICS_PORT", str(port))
    plan = write_plan(
        tmp_path / "plan.json",
        TrainPlan(model="debug", micro_batch=256, num_workers=0, max_epochs=2, eval_batch=4096),
    )
    scraped = []

    def scrape(record: dict) -> None:  # after each epoch's validation, while training goes on
        text = get(f"http://127.0.0.1:{port}/metrics")
        scraped.append(
            {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        )
        assert scraped[-1]["dailyrec_training_val_auc"] == pytest.approx(record["val_auc"])
        assert scraped[-1]["dailyrec_training_samples_per_second"] == pytest.approx(
            record["samples_per_s"]
        )
        assert scraped[-1]["dailyrec_training_data_wait_fraction"] == pytest.approx(
            record["data_wait_fraction"]
        )
        assert scraped[-1]["dailyrec_training_loss"] == pytest.approx(record["train_loss"])

    summary_ = train(
        TrainConfig(data=str(tiny_dataset), out=str(tmp_path / "out"), plan=str(plan)),
        on_epoch=scrape,
    )
    assert [s["dailyrec_training_epoch"] for s in scraped] == [1, 2] and summary_.epochs_run == 2
    assert [s["dailyrec_training_progress_ratio"] for s in scraped] == [0.5, 1.0]
    with pytest.raises(OSError, match="Connection refused"):  # the server ends with the training
        get(f"http://127.0.0.1:{port}/metrics")


def test_metrics_served_only_by_rank_0_and_a_taken_port_is_a_warning(caplog, monkeypatch):
    assert TrainingMetrics.from_env(is_main=False) is None
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        monkeypatch.setenv("DAILYREC_METRICS_PORT", str(taken.getsockname()[1]))
        with caplog.at_level("WARNING", logger="components"):
            metrics = TrainingMetrics.from_env(is_main=True)
    assert metrics is not None and metrics.server is None  # gauges still work, unserved
    metrics.set(loss=0.25, val_auc=None)
    assert metrics.gauges["dailyrec_training_loss"]._value.get() == 0.25
    assert "training metrics not served" in caplog.text


def test_rules_and_dashboard_query_only_metrics_the_code_exports():
    exported = set(RUN_METRICS) | set(TRAINING_METRICS)
    rules = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    rule_exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    panel_exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {m for e in rule_exprs + panel_exprs for m in re.findall(r"\bdailyrec_\w+", e)}
    assert queried <= exported, queried - exported
    assert (
        exported - {"dailyrec_run_finished_timestamp_seconds", "dailyrec_run_total_seconds"}
        <= queried
    )
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {
        "DailyrecRunFailed",
        "DailyrecNoSuccessfulRun",
        "DailyrecCandidateBelowChampion",
        "DailyrecTrainingThroughputLow",
    } <= alerts


def test_promtool_checks_and_unit_tests_the_rules():
    promtool = need("promtool")
    check = subprocess.run(
        [promtool, "check", "rules", "rules.yaml"],
        cwd=MONITORING,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0 and "SUCCESS: 6 rules found" in check.stdout, (
        check.stdout + check.stderr
    )
    tested = subprocess.run(
        [promtool, "test", "rules", "rules.test.yaml"],
        cwd=MONITORING,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
