"""Run a command and measure its wall time and the peak RSS of its whole process tree."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import threading
import time

import psutil


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of a process and all its descendants (0 for ones that just exited)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_info().rss
    return total


def run_measured(cmd: list[str], interval: float = 0.05, env: dict | None = None) -> dict:
    """Run ``cmd``; return seconds, peak tree RSS (bytes) and the output tail. Raises on failure."""
    start = time.perf_counter()
    child = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    proc = psutil.Process(child.pid)
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            try:
                peak = max(peak, tree_rss(proc))
            except psutil.NoSuchProcess:
                return
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = child.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({child.returncode}):\n{output[-3000:]}")
    return {"seconds": round(seconds, 2), "peak_rss_bytes": peak, "output_tail": output[-2000:]}


def machine() -> dict:
    """What the figures were measured on."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            model = next(
                line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "system": platform.system(),
    }
