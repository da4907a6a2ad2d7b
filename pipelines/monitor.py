"""See locally what a cluster user sees: Prometheus with the project's alert rules and a
Pushgateway, or the dashboard's key panels drawn from the runs' own summaries.

``python -m pipelines.monitor serve`` (``make monitor``) starts a Pushgateway and Prometheus from
Debian's packages, both on 127.0.0.1 and both keeping their state under ``ROOT/runs/monitor/``:
Prometheus scrapes the Pushgateway (``honor_labels``, as ``manifests/monitoring/`` asks) and the
trainer's progress port, and evaluates ``manifests/monitoring/rules.yaml``. A ``make run`` with
``DAILYREC_PUSHGATEWAY`` and ``DAILYREC_METRICS_PORT`` set (the line it prints) then shows up in
it. Ctrl-C or SIGTERM stops both.

``python -m pipelines.monitor plots`` (``make dashboard``) draws the Grafana dashboard's key panels
as PNGs from ``ROOT/runs/*/summary.json`` (and each run's decision.json), for users without
Grafana: the values are those the exit handler pushes (:func:`components.common.monitoring.run_outcome`).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from components.common.cli import Exit, HelpFormatter, cli_parser
from components.common.evaluation import Decision
from components.common.run_summary import RunSummary
from components.common.runs import DASHBOARD, MONITOR

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "manifests" / "monitoring" / "rules.yaml"
TOOLS = ("prometheus", "prometheus-pushgateway")
INSTALL = "apt-get install prometheus prometheus-pushgateway (make test-tools does it as root)"
PLOTS = ("auc.png", "stages.png", "throughput.png", "runs.png")
"""The panels ``plots`` draws, in the dashboard's order."""


class MonitorError(RuntimeError):
    """The monitoring stack cannot start (a tool missing, a port taken); the message says which."""


@dataclass(frozen=True)
class Ports:
    prometheus: int = 9090
    pushgateway: int = 9091
    trainer: int = 9400
    """Where rank 0 of a local training serves its progress (``DAILYREC_METRICS_PORT``)."""


def prometheus_config(ports: Ports, rules: Path = RULES, interval: str = "5s") -> dict:
    """Prometheus' configuration: the Pushgateway and the trainer scraped, the alert rules."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "pushgateway",
                "honor_labels": True,  # keep the pushed job="dailyrec" the rules select on
                "static_configs": [{"targets": [f"127.0.0.1:{ports.pushgateway}"]}],
            },
            {
                "job_name": "dailyrec-training",
                "static_configs": [{"targets": [f"127.0.0.1:{ports.trainer}"]}],
            },
        ],
    }


def commands(state: Path, ports: Ports) -> dict[str, list[str]]:
    """The two servers' command lines, each keeping its state under ``state``."""
    found = {tool: shutil.which(tool) for tool in TOOLS}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        raise MonitorError(f"{', '.join(missing)} not installed: {INSTALL}")
    return {
        "pushgateway": [
            found["prometheus-pushgateway"],
            f"--web.listen-address=127.0.0.1:{ports.pushgateway}",
            f"--persistence.file={state / 'pushgateway.state'}",
        ],
        "prometheus": [
            found["prometheus"],
            f"--config.file={state / 'prometheus.yml'}",
            f"--storage.tsdb.path={state / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{ports.prometheus}",
        ],
    }


def _ready(url: str, proc: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text()[-600:].strip().splitlines()
            raise MonitorError(f"{Path(proc.args[0]).name} exited: {tail[-1] if tail else ''}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise MonitorError(f"{url} did not answer in {seconds:.0f} s (log: {log})")


def serve(root: Path, ports: Ports) -> int:
    """Start the Pushgateway and Prometheus; return when told to stop (or one of them exits)."""
    import yaml

    state = Path(root) / "runs" / MONITOR
    state.mkdir(parents=True, exist_ok=True)
    (state / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(ports)))
    argv = commands(state, ports)
    procs: dict[str, subprocess.Popen] = {}

    def stop(*_: object) -> None:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        for name, url in (
            ("pushgateway", f"http://127.0.0.1:{ports.pushgateway}/-/ready"),
            ("prometheus", f"http://127.0.0.1:{ports.prometheus}/-/ready"),
        ):
            log = state / f"{name}.log"
            with log.open("w") as out:
                procs[name] = subprocess.Popen(argv[name], stdout=out, stderr=subprocess.STDOUT)
            _ready(url, procs[name], log)
        print(
            f"Prometheus on http://127.0.0.1:{ports.prometheus} (alerts: /alerts, rules: "
            f"{RULES.relative_to(ROOT)}), Pushgateway on http://127.0.0.1:{ports.pushgateway}; "
            f"state in {state}",
            flush=True,
        )
        print(
            "in another shell, a run that shows up here:\n"
            f"  DAILYREC_PUSHGATEWAY=http://127.0.0.1:{ports.pushgateway} "
            f"DAILYREC_METRICS_PORT={ports.trainer} make run\n"
            "Ctrl-C stops both",
            flush=True,
        )
        while all(proc.poll() is None for proc in procs.values()):
            time.sleep(0.5)
        gone = next(name for name, proc in procs.items() if proc.poll() is not None)
        raise MonitorError(f"{gone} exited (log: {state / (gone + '.log')})")
    finally:
        stop()


# ----------------------------------------------------------------------------- static panels


@dataclass(frozen=True)
class RunPanel:
    """One run as the dashboard draws it: the values the exit handler pushes for it
    (:func:`components.common.monitoring.run_outcome`); None where the run has none."""

    run_id: str
    run_date: str | None
    status: str
    succeeded: bool
    blessed: float | None
    test_auc: float | None
    champion_test_auc: float | None
    tolerance: float | None
    stage_seconds: dict[str, float | None]
    samples_per_second: float | None
    planned_samples_per_second: float | None

    @property
    def label(self) -> str:
        return self.run_date or self.run_id

    @property
    def gate(self) -> float | None:
        """The lowest AUC the gate let through: the champion's, less the tolerance."""
        if self.champion_test_auc is None or self.tolerance is None:
            return None
        return self.champion_test_auc - self.tolerance


def run_values(summary: RunSummary, decision: Decision | None) -> RunPanel:
    """One run's panel values: what the exit handler pushes for it (``run_outcome``)."""
    from components.common.monitoring import run_outcome
    from components.common.runs import STAGES

    registry = run_outcome(summary, decision, now=0.0)

    def value(name: str, **labels: str) -> float | None:
        found = registry.get_sample_value(name, labels)
        return None if found is None or found != found else found  # NaN: the run has none

    return RunPanel(
        run_id=summary.run_id,
        run_date=summary.run_date,
        status=summary.status,
        succeeded=value("dailyrec_run_succeeded") == 1,
        blessed=value("dailyrec_run_blessed"),
        test_auc=value("dailyrec_run_test_auc"),
        champion_test_auc=value("dailyrec_run_champion_test_auc"),
        tolerance=value("dailyrec_run_auc_tolerance"),
        stage_seconds={s: value("dailyrec_run_stage_seconds", stage=s) for s in STAGES},
        samples_per_second=value("dailyrec_run_train_samples_per_second"),
        planned_samples_per_second=value("dailyrec_run_planned_samples_per_second"),
    )


def read_runs(root: Path) -> list[RunPanel]:
    """Every daily run under ``root/runs`` that wrote a summary, oldest first (by its end time);
    ``runs/latest`` (a copy of the newest) once, as its own run."""
    from components.common.runs import SUMMARY, RunFolder

    found = []
    for path in sorted((Path(root) / "runs").glob(f"*/{SUMMARY}")):
        summary = RunSummary.find(path)  # None: being written, damaged, or another pipeline's
        if summary is None or summary.run_id != path.parent.name:
            continue  # runs/latest holds a copy of a run drawn under its own folder
        decision = Decision.find(RunFolder(path.parent).evaluate)
        found.append((path.stat().st_mtime, run_values(summary, decision)))
    return [values for _, values in sorted(found, key=lambda pair: pair[0])]


def _auc_panel(ax, runs: list[RunPanel], x: list[int]) -> None:
    ax.plot(x, [r.test_auc for r in runs], "o-", label="candidate")
    ax.plot(x, [r.champion_test_auc for r in runs], "s--", label="champion, same test day")
    gate = [r.gate for r in runs]
    ax.plot(x, gate, "_", color="grey", markersize=18, label="champion - tolerance (the gate)")
    for i, r in enumerate(runs):
        if r.blessed == 1:
            ax.annotate(
                "blessed",
                (i, r.test_auc),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
    ax.set(title="Test AUC: candidate vs champion", ylabel="test AUC")
    ax.legend()


def _stages_panel(ax, runs: list[RunPanel], x: list[int]) -> None:
    bottom = [0.0] * len(runs)
    for stage in runs[0].stage_seconds:
        heights = [r.stage_seconds.get(stage) or 0.0 for r in runs]
        ax.bar(x, heights, bottom=bottom, label=stage)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set(title="Stage seconds", ylabel="seconds")
    ax.legend(fontsize=8)


def _throughput_panel(ax, runs: list[RunPanel], x: list[int]) -> None:
    ax.plot(x, [r.samples_per_second for r in runs], "o-", label="measured")
    ax.plot(x, [r.planned_samples_per_second for r in runs], "s--", label="planned")
    ax.set(title="Training throughput vs plan", ylabel="samples / s")
    ax.legend()


def _runs_panel(ax, runs: list[RunPanel], x: list[int]) -> None:
    ax.bar(x, [1] * len(runs), color=["tab:green" if r.succeeded else "tab:red" for r in runs])
    for i, r in enumerate(runs):
        word = r.status + ("\nblessed" if r.blessed == 1 else "")
        ax.text(i, 0.5, word, ha="center", va="center", fontsize=7, color="white")
    ax.set(title="Runs (green: succeeded)", yticks=[])


PANELS = (
    (PLOTS[0], (8, 4), _auc_panel),
    (PLOTS[1], (8, 4), _stages_panel),
    (PLOTS[2], (8, 4), _throughput_panel),
    (PLOTS[3], (8, 2.6), _runs_panel),
)
"""Each panel: its file, its size in inches, what draws it."""


def plots(root: Path, out: Path) -> list[Path]:
    """The dashboard's key panels from the runs' summaries, as PNGs in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = read_runs(root)
    if not runs:
        raise MonitorError(f"no runs/*/summary.json under {root}: make run first")
    out.mkdir(parents=True, exist_ok=True)
    x = list(range(len(runs)))
    written = []
    for name, size, draw in PANELS:
        fig, ax = plt.subplots(figsize=size)
        draw(ax, runs, x)
        ax.set(xticks=x, xticklabels=[r.label for r in runs])
        fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m pipelines.monitor",
        "Prometheus with the alert rules and a Pushgateway on this machine (serve), or the "
        "monitoring dashboard's key panels drawn from the runs' summaries (plots).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "serve",
        help="Prometheus with the alert rules and a Pushgateway on 127.0.0.1",
        description="Prometheus with the project's alert rules and a Pushgateway on 127.0.0.1, "
        "until Ctrl-C or SIGTERM.",
        formatter_class=HelpFormatter,
    )
    s.add_argument("--root", default=".", help="storage root: state in ROOT/runs/monitor/")
    s.add_argument("--prometheus-port", type=int, default=Ports.prometheus, help="Prometheus' port")
    s.add_argument(
        "--pushgateway-port", type=int, default=Ports.pushgateway, help="the Pushgateway's port"
    )
    s.add_argument(
        "--trainer-port",
        type=int,
        default=Ports.trainer,
        help="the trainer's progress port Prometheus scrapes (DAILYREC_METRICS_PORT)",
    )
    d = sub.add_parser(
        "plots",
        help="the dashboard's key panels as PNGs from runs/*/summary.json",
        description="The monitoring dashboard's key panels as PNGs, from ROOT/runs/*/summary.json.",
        formatter_class=HelpFormatter,
    )
    d.add_argument("--root", default=".", help="storage root holding runs/")
    d.add_argument("--out", default=None, help="folder of the PNGs (default: ROOT/runs/dashboard)")
    args = p.parse_args(argv)
    try:
        if args.command == "serve":
            ports = Ports(args.prometheus_port, args.pushgateway_port, args.trainer_port)
            return serve(Path(args.root), ports)
        out = Path(args.out) if args.out else Path(args.root) / "runs" / DASHBOARD
        for path in plots(Path(args.root), out):
            print(path)
        return Exit.OK
    except MonitorError as exc:
        print(f"monitor: error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except SystemExit as exc:  # a signal: both servers are stopped by now
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
