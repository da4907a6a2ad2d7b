"""The MLflow pages of a registry as a person sees them, taken by a real browser (headless Chromium).

``python -m pipelines.screenshots --root ROOT`` (``make screenshots``) starts the MLflow UI over
``ROOT/runs/mlflow.db`` on a free local port and, for the newest training and evaluation runs and
the newest registered version, writes what a browser shows (MLflow's *Model training* view) to
``ROOT/runs/screenshots/<page>.png``, with ``pages.json``: each page's address and the text it
rendered, for a reader or a test to check without looking.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from components.common.cli import Exit, cli_parser
from components.common.registry_read import MODEL_NAME
from components.common.runs import SCREENSHOTS
from components.common.tracking import UI_VIEW, sqlite_uri
from components.evaluate.report import REPORT_HTML

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
"""MLflow 3's UI keeps one switch, GenAI or Model training, that starts on GenAI whatever an
experiment's kind; this query selects Model training."""
WINDOW = "1400,1000"
RENDER_MS = 15000
"""Virtual time the browser gives a page's scripts and requests before it is captured."""


class ScreenshotError(RuntimeError):
    """No browser, or the UI did not start; the message says which."""


def browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise ScreenshotError(
        f"no headless browser ({', '.join(BROWSERS)}): apt-get install chromium (make screenshots "
        "does as root)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_ui(tracking_uri: str, timeout_s: float = 60.0) -> Iterator[str]:
    """The MLflow UI over ``tracking_uri`` on a free local port, for the block; its address."""
    port = _free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [str(mlflow), "ui", "--backend-store-uri", tracking_uri, "--host", "127.0.0.1"]
        + ["--port", str(port)],
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{url}/health", timeout=2) as answer,
            ):
                if answer.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ScreenshotError(f"the MLflow UI over {tracking_uri} did not start")
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def _chromium(url: str, *args: str) -> str:
    done = subprocess.run(
        [
            browser(),
            "--headless=new",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={WINDOW}",
            f"--virtual-time-budget={RENDER_MS}",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise ScreenshotError(f"the browser failed on {url}: {done.stderr.strip()[-300:]}")
    return done.stdout


def render(url: str, path: Path) -> str:
    """A screenshot of the page at ``url`` into ``path``, and its visible text once its scripts
    ran (the DOM, tags removed), from one browser start."""
    dom = _chromium(url, "--dump-dom", f"--screenshot={path}")
    if not path.is_file():
        raise ScreenshotError(f"the browser wrote no screenshot of {url}")
    dom = re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", dom)
    return " ".join(re.sub(r"<[^>]+>", " ", dom).split())


def pages(tracking_uri: str, model_name: str) -> dict[str, str]:
    """Page name -> route (after ``#``) of what a person looks at after a run: each stage's runs
    (its experiments are named ``*-train``, ``*-evaluate``) and newest run, and the newest
    version of ``model_name``."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri, registry_uri=tracking_uri)
    experiments = client.search_experiments()
    found: dict[str, str] = {}
    # the evaluation's tab opens on its report page (the artifact view shows HTML)
    for stage, tab in (("train", "model-metrics"), ("evaluate", f"artifactPath/{REPORT_HTML}")):
        ids = [e.experiment_id for e in experiments if e.name.endswith(f"-{stage}")]
        runs = ids and client.search_runs(
            ids, order_by=["attributes.start_time DESC"], max_results=1
        )
        if runs:
            experiment = runs[0].info.experiment_id
            found[f"{stage}-runs"] = f"/experiments/{experiment}/runs"
            found[f"{stage}-run"] = f"/experiments/{experiment}/runs/{runs[0].info.run_id}/{tab}"
    versions = client.search_model_versions(f"name = '{model_name}'")
    if versions:
        newest = max(versions, key=lambda v: int(v.version))
        found["version"] = f"/models/{model_name}/versions/{newest.version}"
    return found


def take(
    tracking_uri: str,
    out: Path,
    model_name: str = MODEL_NAME,
    names: tuple[str, ...] | None = None,
) -> dict[str, dict]:
    """Screenshots and rendered text of :func:`pages` (those in ``names``; None: all), written to
    ``out`` with ``pages.json``."""
    browser()  # say so before starting a server
    routes = {
        k: v for k, v in pages(tracking_uri, model_name).items() if names is None or k in names
    }
    if not routes:
        raise ScreenshotError(f"{tracking_uri} holds no runs of {model_name}: make run first")
    out.mkdir(parents=True, exist_ok=True)
    shown: dict[str, dict] = {}
    with mlflow_ui(tracking_uri) as base:
        for name, route in routes.items():
            url = f"{base}/#{route}?{UI_VIEW}"
            text = render(url, out / f"{name}.png")
            shown[name] = {"route": route, "png": f"{name}.png", "text": text}
    (out / "pages.json").write_text(json.dumps(shown, indent=2))
    return shown


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m pipelines.screenshots",
        "Screenshots of a registry's MLflow pages, taken by headless Chromium.",
    )
    p.add_argument("--root", default=".", help="storage root whose runs/mlflow.db is shown")
    p.add_argument("--model-name", default=MODEL_NAME, help="registered model (and experiments)")
    p.add_argument(
        "--out", default=None, help="folder of the PNGs (default: ROOT/runs/screenshots)"
    )
    args = p.parse_args(argv)
    root = Path(args.root)
    out = Path(args.out) if args.out else root / "runs" / SCREENSHOTS
    try:
        shown = take(sqlite_uri(root / "runs"), out, args.model_name)
    except ScreenshotError as exc:
        print(f"screenshots: error: {exc}", file=sys.stderr)
        return Exit.FAILED
    for name, page in shown.items():
        print(f"{name:<14} {out / page['png']}  (#{page['route']})")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
