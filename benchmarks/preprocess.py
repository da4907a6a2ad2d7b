"""Benchmark: dailyrec's Dask preprocess vs. a pandas in-memory baseline, in one run.

Generates synthetic logs (cached under benchmarks/scratch/), then runs each job as
its own process and measures events/s and the peak RSS of its process tree.
Writes benchmarks/results/preprocess.json and its block in docs/performance.md.

    python -m benchmarks.preprocess                   # 5 M and 20 M events (baseline at 5 M)
    python -m benchmarks.preprocess --sizes 200000 --baseline-sizes 200000   # a quick look
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from benchmarks.measure import machine, run_measured
from benchmarks.readme import NO_README_HELP, ROOT, publish
from components.common.schema import datagen_summary

DAYS, WINDOW_DAYS, HISTORY_DAYS = 10, 8, 2


def dataset(work: Path, events: int) -> Path:
    """Synthetic raw logs of ``events`` rows (generated once, then reused)."""
    raw = work / f"raw-{events}"
    if not datagen_summary(raw).is_file():
        run_measured(
            [
                sys.executable,
                "-m",
                "components.datagen",
                "--out",
                str(raw),
                "--days",
                str(DAYS),
                "--events-per-day",
                str(events // DAYS),
                "--users",
                str(max(1000, events // 50)),
                "--items",
                "200000",
                "--categories",
                "1000",
                "--seed",
                "11",
            ]
        )
    return raw


def measure(job: str, raw: Path, out: Path, events: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    window = ["--days", str(WINDOW_DAYS), "--history-days", str(HISTORY_DAYS)]
    if job == "dailyrec":
        cmd = [
            sys.executable,
            "-m",
            "components.preprocess",
            "--raw",
            str(raw),
            "--out",
            str(out),
            *window,
        ]
    else:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.baseline_pandas",
            "--raw",
            str(raw),
            "--out",
            str(out),
            *window,
        ]
    result = run_measured(cmd)
    record = {
        "job": job,
        "events": events,
        "seconds": result["seconds"],
        "events_per_second": round(events / result["seconds"]),
        "peak_rss_mib": round(result["peak_rss_bytes"] / 2**20),
    }
    if job == "dailyrec":  # where the time went, from the stage's own phase timer
        record["phase_seconds"] = json.loads((out / "meta.json").read_text())["seconds"]
    shutil.rmtree(out, ignore_errors=True)
    print(
        f"  {job:9s} {events:>12,} events  {result['seconds']:8.1f} s  "
        f"{record['events_per_second']:>10,} events/s  peak RSS {record['peak_rss_mib']:>7,} MiB",
        flush=True,
    )
    return record


def summarize(runs: list[dict]) -> list[dict]:
    """Ratios at each size measured for both jobs, plus dailyrec's RSS growth across sizes."""
    by = {(r["job"], r["events"]): r for r in runs}
    rows = []
    for (job, events), ours in sorted(by.items()):
        if job != "dailyrec" or ("pandas", events) not in by:
            continue
        base = by[("pandas", events)]
        rows.append(
            {
                "events": events,
                "speedup": round(ours["events_per_second"] / base["events_per_second"], 2),
                "memory_fraction": round(ours["peak_rss_mib"] / base["peak_rss_mib"], 3),
            }
        )
    ours = sorted((r for r in runs if r["job"] == "dailyrec"), key=lambda r: r["events"])
    if len(ours) > 1:
        rows.append(
            {
                "rss_growth": {
                    "from_events": ours[0]["events"],
                    "to_events": ours[-1]["events"],
                    "input_ratio": round(ours[-1]["events"] / ours[0]["events"], 2),
                    "rss_ratio": round(ours[-1]["peak_rss_mib"] / ours[0]["peak_rss_mib"], 2),
                }
            }
        )
    return rows


def readme_table(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"Measured by `make bench` on {m['cpus']} cores ({m['cpu_model']}), {m['memory_gib']} GiB RAM; "
        f"{DAYS} days of synthetic logs, window {WINDOW_DAYS} + {HISTORY_DAYS} history days, seq_len 20.",
        "",
        "| job | events | seconds | events/s | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in sorted(result["runs"], key=lambda r: (r["events"], r["job"])):
        lines.append(
            f"| {r['job']} | {r['events']:,} | {r['seconds']:.1f} | {r['events_per_second']:,} "
            f"| {r['peak_rss_mib']:,} |"
        )
    lines.append("")
    for row in result["summary"]:
        if "speedup" in row:
            lines.append(
                f"- at {row['events']:,} events: dailyrec is **{row['speedup']}x** the baseline's "
                f"events/s at **{row['memory_fraction']:.2f}x** its peak memory"
            )
        else:
            g = row["rss_growth"]
            lines.append(
                f"- {g['input_ratio']}x the input ({g['from_events']:,} -> {g['to_events']:,} events) "
                f"changes dailyrec's peak RSS by **{g['rss_ratio']}x**"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="5000000,20000000", help="event counts for dailyrec")
    p.add_argument(
        "--baseline-sizes", default="5000000", help="event counts for the pandas baseline"
    )
    p.add_argument("--work", default=str(ROOT / "benchmarks" / "scratch"))
    p.add_argument(
        "--results", default=None, help="JSON path (default: benchmarks/results/preprocess.json)"
    )
    p.add_argument("--no-readme", action="store_true", help=NO_README_HELP)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    baseline_sizes = [int(s) for s in args.baseline_sizes.split(",") if s]
    work = Path(args.work)
    runs = []
    for events in sorted(set(sizes) | set(baseline_sizes)):
        raw = dataset(work, events)
        for job, wanted in (("pandas", baseline_sizes), ("dailyrec", sizes)):
            if events in wanted:
                runs.append(measure(job, raw, work / f"out-{job}-{events}", events))
    result = {
        "benchmark": "preprocess",
        "machine": machine(),
        "runs": runs,
        "summary": summarize(runs),
    }
    publish("preprocess", result, readme_table(result), args.results, readme=not args.no_readme)


if __name__ == "__main__":
    main()
