"""Benchmark: the scoring server's throughput, latency and memory, against MLflow's own server.

On a registered version of the ``local`` model (synthetic logs, preprocessed,
trained one epoch, evaluated and registered under benchmarks/scratch/serving/),
both servers serve the same verified folder on this machine, one worker each:

* ``python -m components.score.serve`` (``make serve``: MLflow's scoring app
  with the strict ``/invocations`` of :mod:`components.score.app`);
* ``mlflow models serve --env-manager local`` (the baseline, same run).

Each answers, over one keep-alive connection, single-row requests (one user
from the snapshot, one item) and 1,000-candidate ranking requests (one user,
1,000 items): requests/s and p50/p99 latency. The server's resident memory is
read after warm-up and after each of a series of request sizes (1 to 20,000
rows of one user, then 20,000 rows of as many users, and the 16 MiB body
bound), to show how memory grows with a request (and how much of it by the first full
batch) and that it is bounded (each user's state is assembled once per request;
bodies and rows are bounded). Then each is **overloaded**: single-row requests
offered open-loop (each on its own connection, at a fixed rate whatever the
answers) at ``LOADS`` times the rate one connection sustained (``OVERLOAD``x last), for
``LOAD_SECONDS``: answered 200, shed with 503, failed otherwise or unanswered
within ``CLIENT_TIMEOUT`` s, the p50/p99 of the answers, and ``/ping``'s latency
meanwhile. Writes
benchmarks/results/serving.json and the block between
``<!-- bench:serving:start/end -->`` (docs/performance.md).

    python -m benchmarks.serving            # a few minutes
    python -m benchmarks.serving --quick    # seconds of requests: a smoke test
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil

from benchmarks.measure import machine, tree_rss
from benchmarks.readme import ROOT, quick_main
from components.score.protocol import PARAMS

NAME = "serving"
WORK = ROOT / "benchmarks" / "scratch" / "serving"
WORLD = {"days": 6, "users": 20_000, "items": 20_000, "categories": 200, "events_per_day": 40_000}
SIZES = (1, 100, 1_000, 10_000, 20_000)
CANDIDATES = 1_000
OVERLOAD = 10
"""The overload's rate, in multiples of the single-row rate one connection sustained."""
LOADS = (0.5, 1, OVERLOAD)
"""Offered rates, in those multiples (a connection a request costs more than a keep-alive one:
1x is already past what the server sustains that way)."""
LOAD_SECONDS = 10
"""How long each rate is offered."""
CLIENT_TIMEOUT = 5.0
"""Seconds a client waits for an answer before counting the request as failed."""


def build(work: Path) -> tuple[str, Path]:
    """A registered version of the ``local`` model, made afresh under ``work`` (the version carries
    a copy of the code); returns the tracking URI and its verified folder."""
    from components.common.integrity import verified_download
    from components.common.plan import TrainPlan, write_plan
    from components.common.tracking import connect, sqlite_uri
    from components.datagen import DatagenConfig, generate
    from components.evaluate.decision import GateRule
    from components.evaluate.stage import EvaluateConfig, evaluate
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import preprocess
    from components.register.config import RegisterConfig
    from components.register.stage import register
    from components.train.trainer import TrainConfig, train

    raw, data, train_out = work / "raw", work / "data", work / "train"
    shutil.rmtree(work, ignore_errors=True)
    uri = sqlite_uri(work / "mlruns")
    generate(DatagenConfig(out=raw, seed=17, **WORLD))
    preprocess(PreprocessConfig(raw=str(raw), out=str(data), days=WORLD["days"], history_days=1))
    plan = write_plan(
        work / "plan.json", TrainPlan(model="local", micro_batch=512, num_workers=0, max_epochs=1)
    )
    train(TrainConfig(data=str(data), out=str(train_out), plan=str(plan), tracking_uri=uri))
    checkpoint = str(train_out / "best.pt")
    evaluated = work / "evaluate"
    evaluate(
        EvaluateConfig(
            data=str(data),
            checkpoint=checkpoint,
            out=str(evaluated),
            model_name="bench",
            tracking_uri=uri,
            rule=GateRule(min_auc=0.0),
        )
    )
    register(
        RegisterConfig(
            checkpoint=checkpoint,
            metrics=str(evaluated / "metrics.json"),
            decision=str(evaluated / "decision.json"),
            model_name="bench",
            tracking_uri=uri,
            data=str(data),
        )
    )
    return uri, verified_download(connect(uri), "bench", 1, work / "verified")


def users_after_window(folder: Path) -> tuple[np.ndarray, int]:
    """The generated users' raw ids and a time after the version's window (every user's last
    event in it), so that each request row is scored from the snapshot."""
    from components.score.features import UserState

    users = UserState.load(folder / "artifacts" / "user_state.npz")
    return np.arange(1, WORLD["users"] + 1), int(users.totals["user"]["exposure"].max()) + 3600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One scoring server process on a free port, and a keep-alive connection to it."""

    def __init__(self, command: list[str], env: dict, port: int, log: Path) -> None:
        self.port = port
        self.log = log
        with open(log, "w") as sink:
            self.process = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + 180
        while True:
            try:
                self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                self.connection.request("GET", "/ping")
                self.connection.getresponse().read()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {log.read_text()[-3000:]}") from None
                time.sleep(0.5)

    def post(self, body: bytes) -> tuple[int, bytes]:
        self.connection.request(
            "POST", "/invocations", body, headers={"Content-Type": "application/json"}
        )
        response = self.connection.getresponse()
        return response.status, response.read()

    def rss(self) -> int:
        return tree_rss(psutil.Process(self.process.pid))

    def stop(self) -> None:
        self.connection.close()
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def body(users, items, ts: int) -> bytes:
    return json.dumps(
        {
            "dataframe_records": [
                {"user_id": int(u), "item_id": int(i), "timestamp": ts}
                for u, i in zip(users, items, strict=True)
            ]
        }
    ).encode()


def latency(server: Server, bodies: list[bytes], rows: int) -> dict:
    """Requests/s and latency percentiles over ``bodies`` sent one after another."""
    server.post(bodies[0])  # warm-up
    seconds = []
    for payload in bodies:
        start = time.perf_counter()
        status, answer = server.post(payload)
        seconds.append(time.perf_counter() - start)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {answer[:300]!r}")
    total = sum(seconds)
    return {
        "requests": len(bodies),
        "rows_per_request": rows,
        "requests_per_s": round(len(bodies) / total, 2),
        "rows_per_s": round(len(bodies) * rows / total, 1),
        "p50_ms": round(1000 * float(np.percentile(seconds, 50)), 2),
        "p99_ms": round(1000 * float(np.percentile(seconds, 99)), 2),
    }


async def _request(port: int, raw: bytes, timeout: float) -> tuple[int | None, float]:
    """One request on its own connection: ``(HTTP status or None when unanswered, seconds)``."""
    started = time.perf_counter()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            await reader.read()  # to the end: the answer is whole
    except (TimeoutError, OSError, ValueError, IndexError):
        status = None
    finally:
        if writer is not None:
            writer.close()
    return status, time.perf_counter() - started


def _raw(method: str, path: str, payload: bytes = b"") -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def _offer(port: int, bodies: list[bytes], rate: float, seconds: float) -> dict:
    """``bodies`` (cycled) offered at ``rate`` requests/s for ``seconds``, open-loop, with a
    ``/ping`` every quarter second meanwhile."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    total = max(1, int(rate * seconds))
    tasks, pings = [], []

    async def ping() -> None:
        while loop.time() - start < seconds:
            pings.append(await _request(port, _raw("GET", "/ping"), CLIENT_TIMEOUT))
            await asyncio.sleep(0.25)

    pinger = asyncio.create_task(ping())
    for i in range(total):
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        raw = _raw("POST", "/invocations", bodies[i % len(bodies)])
        tasks.append(asyncio.create_task(_request(port, raw, CLIENT_TIMEOUT)))
    offered = total / max(loop.time() - start, 1e-9)
    answers = await asyncio.gather(*tasks)
    await pinger
    return {"answers": answers, "pings": pings, "offered_per_s": offered}


def overload(port: int, bodies: list[bytes], rate: float, seconds: float) -> dict:
    """What a server answers to single-row requests offered at ``rate`` for ``seconds``."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a connection a request
    try:
        out = asyncio.run(_offer(port, bodies, rate, seconds))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    status = np.array([s or 0 for s, _ in out["answers"]])
    took = np.array([t for _, t in out["answers"]])
    answered = status > 0
    ping = np.array([t for s, t in out["pings"] if s == 200]) if out["pings"] else np.zeros(0)

    def pct(values: np.ndarray, q: float) -> float | None:
        return round(1000 * float(np.percentile(values, q)), 1) if len(values) else None

    n = len(status)
    return {
        "rate_per_s": round(rate, 1),
        "offered_per_s": round(out["offered_per_s"], 1),
        "requests": n,
        "ok": round(float(np.mean(status == 200)), 4),
        "shed_503": round(float(np.mean(status == 503)), 4),
        "errors": round(float(np.mean((status != 200) & (status != 503))), 4),
        "p50_ms": pct(took[answered], 50),
        "p99_ms": pct(took[answered], 99),
        "ok_p99_ms": pct(took[status == 200], 99),
        "shed_p99_ms": pct(took[status == 503], 99),
        "ping_p99_ms": pct(ping, 99),
        "pings_failed": sum(1 for s, _ in out["pings"] if s != 200),
    }


def memory(server: Server, users: np.ndarray, ts: int, rng) -> list[dict]:
    """The server's resident memory after warm-up and after each request size."""
    from components.score.protocol import MAX_BYTES

    rows = [{"request": "after warm-up", "status": 200, "rss_mib": server.rss() / 2**20}]
    one = int(rng.choice(users))
    for size in SIZES:
        status, _ = server.post(body(np.full(size, one), rng.integers(0, WORLD["items"], size), ts))
        rows.append({"request": f"{size:,} rows, one user", "status": status})
        rows[-1]["rss_mib"] = server.rss() / 2**20
    many = rng.choice(users, SIZES[-1])
    status, _ = server.post(body(many, rng.integers(0, WORLD["items"], SIZES[-1]), ts))
    rows.append({"request": f"{SIZES[-1]:,} rows, as many users", "status": status})
    rows[-1]["rss_mib"] = server.rss() / 2**20
    status, _ = server.post(b" " * (MAX_BYTES + 1))
    rows.append(
        {"request": f"a {MAX_BYTES / 2**20 + 1e-6:.0f} MiB + 1 byte body", "status": status}
    )
    rows[-1]["rss_mib"] = server.rss() / 2**20
    for row in rows:
        row["rss_mib"] = round(row["rss_mib"], 1)
    return rows


def measure_server(kind: str, folder: Path, uri: str, quick: bool) -> dict:
    port = _free_port()
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    if kind == "dailyrec":
        command = [sys.executable, "-m", "components.score.serve", "--model", "models:/bench/1"]
        command += ["--port", str(port), "--tracking-uri", uri]
    else:
        mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or "mlflow"
        command = [mlflow, "models", "serve", "-m", str(folder), "--env-manager", "local"]
        command += ["-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    server = Server(command, env, port, WORK / f"{kind}.log")
    try:
        users, ts = users_after_window(folder)
        rng = np.random.default_rng(5)
        n_single, n_rank = (20, 4) if quick else (400, 40)
        single = [body([rng.choice(users)], rng.integers(0, WORLD["items"], 1), ts)]
        single += [
            body([rng.choice(users)], rng.integers(0, WORLD["items"], 1), ts)
            for _ in range(n_single - 1)
        ]
        ranking = [
            body(
                np.full(CANDIDATES, rng.choice(users)),
                rng.integers(0, WORLD["items"], CANDIDATES),
                ts,
            )
            for _ in range(n_rank)
        ]
        result = {
            "server": kind,
            "command": " ".join(command[1:4]) if kind == "dailyrec" else "mlflow models serve",
            "single_row": latency(server, single, 1),
            "ranking": latency(server, ranking, CANDIDATES),
        }
        result["memory"] = memory(server, users, ts, rng)
        sustained = result["single_row"]["requests_per_s"]
        seconds = 2 if quick else LOAD_SECONDS
        result["load"] = []
        for times in LOADS:
            print(f"{kind}: offering {times}x {sustained:.0f} requests/s", flush=True)
            result["load"].append(
                {"times": times, **overload(port, single, times * sustained, seconds)}
            )
            time.sleep(2)  # let the backlog drain before the next rate
        return result
    finally:
        server.stop()


def measure(quick: bool) -> dict:
    started = time.perf_counter()
    uri, folder = build(WORK)
    built = time.perf_counter() - started
    servers = [measure_server(kind, folder, uri, quick) for kind in ("dailyrec", "mlflow")]
    ours, theirs = servers
    rss = [r["rss_mib"] for r in ours["memory"]]
    batch = PARAMS["batch_size"].default
    # the row of the first request of a full batch (the warm-up is row 0)
    first_full = next((i + 1 for i, size in enumerate(SIZES) if size >= batch), len(SIZES))
    return {
        "machine": machine(),
        "quick": quick,
        "model": "local",
        "world": WORLD,
        "build_seconds": round(built, 1),
        "servers": servers,
        "ratios": {
            "single_row_requests_per_s": round(
                ours["single_row"]["requests_per_s"] / theirs["single_row"]["requests_per_s"], 2
            ),
            "ranking_requests_per_s": round(
                ours["ranking"]["requests_per_s"] / theirs["ranking"]["requests_per_s"], 2
            ),
        },
        "overload_errors": {s["server"]: s["load"][-1]["errors"] for s in servers},
        "memory_growth_mib": round(max(rss) - rss[0], 1),
        "memory_growth_first_batch_mib": round(max(rss[: first_full + 1]) - rss[0], 1),
        "batch_size": batch,
    }


def readme_table(result: dict) -> str:
    m = result["machine"]
    ours, theirs = result["servers"]
    lines = [
        f"Measured by `python -m benchmarks.serving` on {m['cpus']} cores ({m['cpu_model']}), "
        f"{m['memory_gib']} GiB RAM; the `{result['model']}` model, one server worker, one "
        f"client connection{' (--quick)' if result['quick'] else ''}.",
        "",
        "| server | request | requests/s | rows/s | p50 (ms) | p99 (ms) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for server in (ours, theirs):
        for key, label in (("single_row", "1 row"), ("ranking", f"{CANDIDATES:,} candidates")):
            r = server[key]
            lines.append(
                f"| {server['command']} | {label} | {r['requests_per_s']:,.1f} | "
                f"{r['rows_per_s']:,.0f} | {r['p50_ms']:,.1f} | {r['p99_ms']:,.1f} |"
            )
    lines += [
        "",
        f"- dailyrec / MLflow requests/s: single row "
        f"**{result['ratios']['single_row_requests_per_s']:.2f}x**, {CANDIDATES:,} candidates "
        f"**{result['ratios']['ranking_requests_per_s']:.2f}x**, on the same valid requests (on "
        "others MLflow's server drops unknown columns and params; this one refuses them)",
        "",
        "| request (dailyrec server) | HTTP | server RSS (MiB) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {r['request']} | {r['status']} | {r['rss_mib']:,.0f} |" for r in ours["memory"]]
    lines += load_table(result)
    lines += [
        "",
        f"- memory growth over all request sizes: **{result['memory_growth_mib']:,.0f} MiB**, "
        f"{result['memory_growth_first_batch_mib']:,.0f} MiB of it by the first request of a full "
        f"batch ({result['batch_size']:,} rows, `params.batch_size`), the rest with the rows of "
        f"the larger requests (up to {SIZES[-1]:,}: a request's rows are featurized together, then "
        "scored a batch at a time); the body bound caps a request",
    ]
    return "\n".join(lines)


def load_table(result: dict) -> list[str]:
    """Open-loop load at ``LOADS`` times the sustained single-row rate, per server."""
    if "load" not in result["servers"][0]:
        return []
    lines = [
        "",
        f"Open-loop load: single-row requests, each on its own connection, offered for "
        f"{LOAD_SECONDS} s at {', '.join(f'{x:g}x' for x in LOADS)} the rate one keep-alive "
        f"connection sustained (the load generator shares the machine's cores); a request "
        f"unanswered in {CLIENT_TIMEOUT:g} s is an error.",
        "",
        "| server | load | offered/s | 200 | 503 (shed) | errors | p50 (ms) | p99 (ms) | p99 of "
        "200s (ms) | p99 of 503s (ms) | /ping p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:,.1f}"

    for server in result["servers"]:
        for r in server["load"]:
            lines.append(
                f"| {server['command']} | {r['times']:g}x | {r['offered_per_s']:,.0f} | "
                f"{r['ok']:.1%} | {r['shed_503']:.1%} | {r['errors']:.1%} | {ms(r['p50_ms'])} | "
                f"{ms(r['p99_ms'])} | {ms(r['ok_p99_ms'])} | {ms(r['shed_p99_ms'])} | "
                f"{ms(r['ping_p99_ms'])} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    return quick_main(NAME, __doc__, "few requests: a smoke test", measure, readme_table, argv)


if __name__ == "__main__":
    sys.exit(main())
