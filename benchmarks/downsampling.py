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
that run against ``r = 1``. The goal (make run's world: the same quality at most ``TIME_TARGET``
of the time) is judged over ``GOAL_SEEDS``: r = 1 and the defaults trained with each seed, each
pair compared with itself, the mean of the differences against the margins. Writes
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
GOAL_SEEDS = (0, 1, 2)
"""Seeds of the goal's comparison on make run's world (the defaults against r = 1): two draws
of the negatives and initializations move test AUC by about the margin itself, so one pair
cannot settle it; the goal is judged on the mean of the paired differences."""


def _run(
    data: Path, work: Path, labels, users, epochs: int, keep: float, ratio: float, seed: int
) -> dict:
    """One training at share ``keep`` and at most ``ratio`` negatives per positive (0: no limit)
    with the plan's ``seed``, scored on the whole test split."""
    prob, info = train_dailyrec(
        data, work, epochs, keep, False, negatives_per_positive=ratio, seed=seed
    )
    shutil.rmtree(work)  # scored: a dozen trainings' checkpoints would hold gigabytes of scratch
    test = summarize(prob, labels, users)
    return {
        "seed": seed,
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

    def train(self, keep: float, ratio: float, name: str, seed: int = 0, full=None) -> dict:
        """A training against ``full`` (default: the first, full-data training)."""
        work = self.root / self.world.name / (f"{name}-seed-{seed}" if seed else name)
        run = _run(self.data, work, self.labels, self.users, self.epochs, keep, ratio, seed)
        run = _versus(run, full or (self.runs[0] if self.runs else run))
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

    def seeded(self, keep: float, ratio: float, seeds: tuple[int, ...]) -> dict:
        """The defaults against full-data training with each seed (the first is the grid's):
        each pair shares its initialization and shuffling, so the pair's difference is the
        sampling's, and the mean over seeds is what the goal is judged on."""
        pairs = [(self.runs[0], self.default)]
        for seed in seeds[1:]:
            full = self.train(1.0, 0, "keep-1", seed)
            pairs.append((full, self.train(keep, ratio, f"ratio-{ratio:g}", seed, full=full)))
        deltas = {
            k: [default["vs_full"][k] for _, default in pairs]
            for k in ("auc", "gauc", "logloss", "ece", "time_ratio")
        }
        mean = {k: float(np.mean(v)) for k, v in deltas.items()}
        return {
            "seeds": list(seeds),
            "pairs": [
                {"seed": full["seed"], "full": _brief(full), "default": _brief(default)}
                for full, default in pairs
            ],
            "deltas": deltas,
            "mean": mean,
            "same_quality": bool(mean["auc"] >= -AUC_MARGIN and mean["ece"] <= ECE_MARGIN),
        }

    def result(self) -> dict:
        return {
            "world": self.world.name,
            "source": self.world.source,
            "train_positives": self.positives,
            "train_negatives": self.negatives,
            "runs": self.runs,
            "default": self.default,
        }


def _brief(run: dict) -> dict:
    return {k: run[k] for k in ("negative_keep", "auc", "ece", "train_seconds", "rows_trained")}


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
    goal = result["goal"]
    mean, deltas = goal["mean"], goal["deltas"]
    time_ratio = mean["time_ratio"]
    lines += [
        "",
        f"Smallest r of the same quality on every world: **{result['chosen']:g}**, the daily "
        f"pipeline's default `negative_keep`. Smallest whole number of negatives per positive "
        f"that keeps at least that world's smallest same-quality r on each: **{ratio:g}**, the "
        f"default `negatives_per_positive` (rows in bold: the defaults together).",
        "",
        f"The goal, on {goal['world']} with {len(goal['seeds'])} seeds (each pair of trainings "
        f"shares its seed): test AUC {mean['auc']:+.4f} on average "
        f"({min(deltas['auc']):+.4f} .. {max(deltas['auc']):+.4f}; within "
        f"{result['auc_margin']:g}), ECE {mean['ece']:+.4f} (within {result['ece_margin']:g}): "
        f"**{'the same quality' if goal['same_quality'] else 'not the same quality'}**; "
        f"training time ×{time_ratio:.2f} of full-data training's (target ≤ "
        f"×{result['time_target']:g}: **{'met' if time_ratio <= result['time_target'] else 'not met'}**).",
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
    goal = measured[0].seeded(share, ratio, GOAL_SEEDS[:2] if args.quick else GOAL_SEEDS)
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
        "goal": {"world": measured[0].world.name, **goal},
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
