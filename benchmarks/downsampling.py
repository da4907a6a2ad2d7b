"""Benchmark: negative downsampling, what it saves and what it costs, in one run on one machine.

For each world of the quality benchmark (make run's sample, the denser synthetic world and
MovieLens-100K, prepared as it prepares them) and each share ``r`` of the training negatives
kept, the pipeline's own estimate (``configs/local.json``'s model, hardware profile, global batch
and epochs, with ``--negative-keep r``) plans a training that the pipeline's launcher runs
(torchrun); its best checkpoint scores the whole test split, which is never sampled. Reported:
test AUC, GAUC, logloss and ECE (the model adds ``log r`` to its logits, so its probabilities
are calibrated to all rows), the training stage's wall seconds (start-up and validation
included) and rows trained on, each against ``r = 1`` (every row) of the same world.

It names the smallest ``r`` whose test AUC stays within ``AUC_MARGIN`` and ECE within
``ECE_MARGIN`` of ``r = 1`` on every world: the daily pipeline's default ``negative_keep``
(``pipelines/parameters.py``; a test holds the two equal). Writes benchmarks/results/downsampling.json and the block
between ``<!-- bench:downsampling:start/end -->`` (docs/performance.md).

    python -m benchmarks.downsampling                     # every world, r in 1, 0.5, 0.25, 0.1
    python -m benchmarks.downsampling --quick --no-readme  # a small world: a smoke test
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from benchmarks.measure import machine
from benchmarks.readme import NO_README_HELP, publish
from benchmarks.worlds import CONFIG, QUICK, SCRATCH, WORLDS, prepare, train_dailyrec
from components.evaluate.metrics import summarize

NAME = "downsampling"
KEEPS = (1.0, 0.5, 0.25, 0.1)
AUC_MARGIN, ECE_MARGIN = 0.001, 0.002
"""How far from full-data training a sampled one may land and still count as the same quality."""
TIME_TARGET = 0.4
"""The training stage's time at the shipped default over full-data training's, on make run's world."""


def measure(world, root: Path, keeps: tuple[float, ...], epochs: int) -> dict:
    """One world: a training per ``r`` in ``keeps`` (the first must be 1), each scored on the test
    split, with its ratios to the first."""
    _, data = prepare(world, root)
    labels = np.load(data / "test" / "label.npy").astype(np.float64)
    users = np.load(data / "test" / "user_key.npy")
    runs = []
    for keep in keeps:
        prob, info = train_dailyrec(data, root / world.name / f"keep-{keep:g}", epochs, keep, False)
        test = summarize(prob, labels, users)
        runs.append(
            {
                "negative_keep": keep,
                **{k: test[k] for k in ("auc", "gauc", "logloss", "ece")},
                "train_seconds": info["train_seconds"],
                "rows_trained": info["rows_trained"],
                "epochs_run": info["epochs_run"],
            }
        )
        print(
            f"  {world.name:<16} r={keep:<5g} AUC {test['auc']:.4f}  ECE {test['ece']:.4f}  "
            f"{info['train_seconds']:7.1f} s  {info['rows_trained']:,} rows",
            flush=True,
        )
    full = runs[0]
    for run in runs:
        run["vs_full"] = {
            "auc": run["auc"] - full["auc"],
            "gauc": run["gauc"] - full["gauc"],
            "logloss": run["logloss"] - full["logloss"],
            "ece": run["ece"] - full["ece"],
            "time_ratio": run["train_seconds"] / full["train_seconds"],
        }
        run["same_quality"] = bool(
            run["vs_full"]["auc"] >= -AUC_MARGIN and run["vs_full"]["ece"] <= ECE_MARGIN
        )
    return {"world": world.name, "source": world.source, "runs": runs}


def choose(worlds: list[dict]) -> float:
    """The smallest ``r`` of the same quality as full-data training on every world."""
    keeps = [run["negative_keep"] for run in worlds[0]["runs"]]
    same = [
        keep
        for keep in keeps
        if all(
            next(r for r in w["runs"] if r["negative_keep"] == keep)["same_quality"] for w in worlds
        )
    ]
    return min(same)


def readme_table(result: dict) -> str:
    host = result["machine"]
    lines = [
        f"Measured on {host.get('cpu_model', '?')} ({host.get('cpus', '?')} cores); each world's "
        f"trainings in one run, its test split never sampled. Same quality = test AUC within "
        f"{result['auc_margin']:g} and ECE within {result['ece_margin']:g} of r = 1.",
        "",
        "| world | r (negatives kept) | rows trained | test AUC (Δ) | GAUC (Δ) | logloss (Δ) | "
        "ECE (Δ) | training s (× r = 1) | same quality |",
        "|---|---:|---:|---:|---:|---:|---:|---:|:-:|",
    ]
    for world in result["worlds"]:
        for run in world["runs"]:
            d = run["vs_full"]
            lines.append(
                f"| {world['world']} | {run['negative_keep']:g} | {run['rows_trained']:,} | "
                f"{run['auc']:.4f} ({d['auc']:+.4f}) | {run['gauc']:.4f} ({d['gauc']:+.4f}) | "
                f"{run['logloss']:.4f} ({d['logloss']:+.4f}) | {run['ece']:.4f} ({d['ece']:+.4f}) | "
                f"{run['train_seconds']:,.0f} (×{d['time_ratio']:.2f}) | "
                f"{'yes' if run['same_quality'] else 'no'} |"
            )
    lines += [
        "",
        f"Smallest r of the same quality on every world: **{result['chosen']:g}**, the daily "
        "pipeline's default `negative_keep`.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small world, two shares: a smoke test")
    p.add_argument("--worlds", default=",".join(w.name for w in WORLDS), help="worlds to run")
    p.add_argument(
        "--keeps", default=",".join(f"{k:g}" for k in KEEPS), help="shares of negatives kept"
    )
    p.add_argument("--epochs", type=int, default=None, help="default: configs/local.json's")
    p.add_argument("--scratch", default=str(SCRATCH), help="where worlds and datasets are kept")
    p.add_argument("--results", default=None, help="JSON output (default: benchmarks/results/)")
    p.add_argument("--no-readme", action="store_true", help=NO_README_HELP)
    args = p.parse_args(argv)
    import json

    keeps = (1.0, 0.25) if args.quick else tuple(float(k) for k in args.keeps.split(","))
    if keeps[0] != 1.0:
        p.error("--keeps must start with 1 (every row): the others are compared with it")
    epochs = args.epochs or json.loads(CONFIG.read_text())["max_epochs"]
    worlds = [QUICK] if args.quick else [w for w in WORLDS if w.name in args.worlds.split(",")]
    measured = [measure(w, Path(args.scratch), keeps, epochs) for w in worlds]
    result = {
        "benchmark": NAME,
        "machine": machine(),
        "quick": args.quick,
        "epochs": epochs,
        "auc_margin": AUC_MARGIN,
        "ece_margin": ECE_MARGIN,
        "worlds": measured,
        "chosen": choose(measured),
    }
    publish(
        NAME,
        result,
        readme_table(result),
        args.results,
        throwaway=args.quick,
        readme=not args.no_readme,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
