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
(``pipelines/parameters.py``). A share that suits a log where clicks are rare loses on one where
they are common, so it also names the smallest whole number of negatives per positive that
keeps, on every world, at least the smallest same-quality ``r`` measured there: the default
``negatives_per_positive`` (``pipelines/parameters.py``; tests hold both equal). Then it
trains each world with both defaults together (a run of its own where they sample) and reports
that run against ``r = 1``, with the time target on make run's world. Writes
benchmarks/results/downsampling.json and the block between
``<!-- bench:downsampling:start/end -->`` (docs/performance.md).

    python -m benchmarks.downsampling                     # every world, r in 1, 0.5, 0.25, 0.1
    python -m benchmarks.downsampling --quick --no-readme  # a small world: a smoke test
"""

from __future__ import annotations

import argparse
import math
import shutil
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


def _run(data: Path, work: Path, labels, users, epochs: int, keep: float, ratio: float) -> dict:
    """One training at share ``keep`` and at most ``ratio`` negatives per positive (0: no limit),
    scored on the whole test split."""
    prob, info = train_dailyrec(data, work, epochs, keep, False, negatives_per_positive=ratio)
    shutil.rmtree(work)  # scored: a dozen trainings' checkpoints would hold gigabytes of scratch
    test = summarize(prob, labels, users)
    return {
        "negative_keep": info["negative_keep"],
        **{k: test[k] for k in ("auc", "gauc", "logloss", "ece")},
        "train_seconds": info["train_seconds"],
        "rows_trained": info["rows_trained"],
        "epochs_run": info["epochs_run"],
    }


def _versus(run: dict, full: dict) -> dict:
    """``run`` with its differences from full-data training and whether it is the same quality."""
    run["vs_full"] = {
        **{k: run[k] - full[k] for k in ("auc", "gauc", "logloss", "ece")},
        "time_ratio": run["train_seconds"] / full["train_seconds"],
    }
    run["same_quality"] = bool(
        run["vs_full"]["auc"] >= -AUC_MARGIN and run["vs_full"]["ece"] <= ECE_MARGIN
    )
    return run


def _print(world: str, run: dict) -> None:
    print(
        f"  {world:<16} r={run['negative_keep']:<6g} AUC {run['auc']:.4f}  ECE {run['ece']:.4f}  "
        f"{run['train_seconds']:7.1f} s  {run['rows_trained']:,} rows",
        flush=True,
    )


class WorldRuns:
    """One world's dataset and its trainings, each against full-data training (the first)."""

    def __init__(self, world, root: Path, epochs: int) -> None:
        from components.common.dataset_meta import DatasetMeta

        self.world, self.root, self.epochs = world, root, epochs
        _, self.data = prepare(world, root)
        self.labels = np.load(self.data / "test" / "label.npy").astype(np.float64)
        self.users = np.load(self.data / "test" / "user_key.npy")
        self.train_split = DatasetMeta.read(self.data).split("train")
        self.positives, self.negatives = self.train_split.label_counts
        self.runs: list[dict] = []
        self.default: dict | None = None

    def train(self, keep: float, ratio: float, name: str) -> dict:
        run = _run(
            self.data,
            self.root / self.world.name / name,
            self.labels,
            self.users,
            self.epochs,
            keep,
            ratio,
        )
        run = _versus(run, self.runs[0] if self.runs else run)
        _print(self.world.name, run)
        return run

    def grid(self, keeps: tuple[float, ...]) -> None:
        """A training per share in ``keeps`` (the first must be 1), with no ratio limit."""
        for keep in keeps:
            self.runs.append(self.train(keep, 0, f"keep-{keep:g}"))

    def smallest_same(self) -> float:
        """The smallest share of the same quality, with every larger share measured also so."""
        ordered = sorted(self.runs, key=lambda run: -run["negative_keep"])
        smallest = ordered[0]["negative_keep"]
        for run in ordered:
            if not run["same_quality"]:
                break
            smallest = run["negative_keep"]
        return smallest

    def needed_ratio(self) -> float:
        """Negatives per positive that the smallest same-quality share keeps on this world."""
        return self.smallest_same() * self.negatives / self.positives

    def measure_default(self, keep: float, ratio: float) -> None:
        """The daily defaults' training on this world: a run of its own where they sample."""
        from components.estimate.rows import negative_share

        share = negative_share(self.train_split, keep, ratio)
        same = next((r for r in self.runs if r["negative_keep"] == share), None)
        self.default = same or self.train(keep, ratio, f"ratio-{ratio:g}")
        self.default = {**self.default, "negatives_per_positive": ratio}

    def result(self) -> dict:
        return {
            "world": self.world.name,
            "source": self.world.source,
            "train_positives": self.positives,
            "train_negatives": self.negatives,
            "runs": self.runs,
            "default": self.default,
        }


def choose(worlds: list[WorldRuns]) -> tuple[float, float]:
    """The smallest share of the same quality as full-data training on every world, and the
    smallest whole number of negatives per positive that keeps, on each world, at least the
    smallest same-quality share measured there."""
    keeps = [run["negative_keep"] for run in worlds[0].runs]
    share = min(
        keep
        for keep in keeps
        if all(
            next(r for r in w.runs if r["negative_keep"] == keep)["same_quality"] for w in worlds
        )
    )
    ratio = float(math.ceil(max(w.needed_ratio() for w in worlds) - 1e-9))
    return share, ratio


def _row(world: str, label: str, run: dict) -> str:
    d = run["vs_full"]
    return (
        f"| {world} | {label} | {run['rows_trained']:,} | "
        f"{run['auc']:.4f} ({d['auc']:+.4f}) | {run['gauc']:.4f} ({d['gauc']:+.4f}) | "
        f"{run['logloss']:.4f} ({d['logloss']:+.4f}) | {run['ece']:.4f} ({d['ece']:+.4f}) | "
        f"{run['train_seconds']:,.0f} (×{d['time_ratio']:.2f}) | "
        f"{'yes' if run['same_quality'] else 'no'} |"
    )


def readme_table(result: dict) -> str:
    host = result["machine"]
    ratio = result["chosen_ratio"]
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
            lines.append(_row(world["world"], f"{run['negative_keep']:g}", run))
        default = world["default"]
        lines.append(
            _row(
                world["world"],
                f"**{default['negative_keep']:g}** (≤ {ratio:g} per positive; "
                f"{world['train_negatives'] / world['train_positives']:.1f} in the data)",
                default,
            )
        )
    first = result["worlds"][0]
    time_ratio = first["default"]["vs_full"]["time_ratio"]
    lines += [
        "",
        f"Smallest r of the same quality on every world: **{result['chosen']:g}**, the daily "
        f"pipeline's default `negative_keep`. Smallest whole number of negatives per positive "
        f"that keeps at least that world's smallest same-quality r on each: **{ratio:g}**, the "
        f"default `negatives_per_positive` (rows in bold: the defaults together). On "
        f"{first['world']} the defaults train in ×{time_ratio:.2f} of full-data training's "
        f"time (target ≤ ×{result['time_target']:g}: "
        f"{'met' if time_ratio <= result['time_target'] else 'not met'}).",
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
    measured = [WorldRuns(w, Path(args.scratch), epochs) for w in worlds]
    for world in measured:
        world.grid(keeps)
    share, ratio = choose(measured)
    for world in measured:
        world.measure_default(share, ratio)
    result = {
        "benchmark": NAME,
        "machine": machine(),
        "quick": args.quick,
        "epochs": epochs,
        "auc_margin": AUC_MARGIN,
        "ece_margin": ECE_MARGIN,
        "time_target": TIME_TARGET,
        "worlds": [w.result() for w in measured],
        "chosen": share,
        "chosen_ratio": ratio,
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
