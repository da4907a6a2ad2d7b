"""Model development on real logs without the benchmark's test weeks: MovieLens-100K windows
that end before them.

The quality benchmark judges dailyrec on MovieLens-100K's last four weeks (``benchmarks.worlds``).
A change to the model or its plan is chosen here instead, on windows of the same logs that end
``--shift`` days earlier (28: the last four weeks never seen; their test weeks are the
benchmark's validation weeks), with the benchmark's protocol otherwise: the pipeline's estimate,
launcher and trainer, the checkpoint chosen on validation, four weeks of test. Each variant
overrides fields of the plan (``name={"embedding_l2": 2.0}``); ``base`` is the plan as the
estimate makes it. Printed per run and per variant (mean over seeds): AUC and GAUC on the
window's validation and test weeks, and GAUC minus the item prior's (the ``item_click_logit``
count feature alone, the baseline dailyrec trails within users), with its interval, users as
the unit. Results go to the scratch folder, not to the published benchmarks.

    python -m benchmarks.devwindows 'base={}' 'l2={"embedding_l2": 2.0}' --seeds 0,1
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from benchmarks import movielens
from benchmarks.measure import run_measured
from benchmarks.worlds import CONFIG, SCRATCH, WORLDS, MovieLens, plan_and_train
from components.common.plan import TrainPlan

WORLD = next(w for w in WORLDS if isinstance(w, MovieLens))


def check_shift(shift: int, world: MovieLens = WORLD) -> None:
    """A window ``shift`` days earlier must keep training days; a ValueError says the range."""
    most = world.window_days - world.val_days - world.test_days
    if not 0 < shift < most:
        raise ValueError(f"--shift must leave training days: 0 < shift < {most}, got {shift}")


def dev_window(last_day: str, shift: int, world: MovieLens = WORLD) -> dict[str, str | int]:
    """The window ``shift`` days before the benchmark's: same first day, same split lengths."""
    check_shift(shift, world)
    end = dt.date.fromisoformat(last_day) - dt.timedelta(days=shift)
    return {
        "end_date": end.isoformat(),
        "days": world.window_days - shift,
        "history_days": world.history_days,
        "val_days": world.val_days,
        "test_days": world.test_days,
    }


def variant(text: str) -> tuple[str, dict]:
    """``name=JSON`` of plan fields to override."""
    name, sep, fields = text.partition("=")
    try:
        overrides = json.loads(fields) if sep else None
    except ValueError:
        overrides = None
    if not name or not isinstance(overrides, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME={{plan field: value, ...}}")
    return name, overrides


def prepare(root: Path, shift: int) -> Path:
    raw = root / "raw"
    movielens.fetch(raw)
    last = max(p.name.removeprefix("dt=") for p in raw.glob("dt=*"))
    window = dev_window(last, shift)
    data = root / f"dataset-shift{shift}"
    flags = [a for key, value in window.items() for a in (f"--{key.replace('_', '-')}", str(value))]
    run_measured(
        [sys.executable, "-m", "components.preprocess", "--raw", str(raw), "--out", str(data)]
        + flags
    )
    return data


def train(data: Path, work: Path, overrides: dict, seed: int) -> Path:
    """The estimate's plan with ``overrides`` and ``seed``, trained as the pipeline trains."""
    shutil.rmtree(work, ignore_errors=True)
    max_epochs = json.loads(CONFIG.read_text())["max_epochs"]
    flags = ["--max-epochs", str(max_epochs)]
    return plan_and_train(data, work, flags, {"seed": seed, **overrides}) / "best.pt"


def judge(data: Path, checkpoint: Path) -> dict:
    """AUC, GAUC and GAUC minus the item prior's on the validation and test weeks."""
    from components.common.dataset import DENSE_FEATURES
    from components.common.dataset_meta import DatasetMeta
    from components.common.metrics import roc_auc
    from components.evaluate.metrics import gauc, paired_gauc
    from components.train.inference import load_scorer, predict_logits, split_rows

    scorer = load_scorer(checkpoint)
    meta = DatasetMeta.read(data)
    column = DENSE_FEATURES.index("item_click_logit")
    out = {}
    for split in ("val", "test"):
        labels = np.load(data / split / "label.npy")
        users = np.load(data / split / "user_key.npy")
        prior = np.load(data / split / "dense.npy", mmap_mode="r")[:, column].astype(np.float64)
        scores = predict_logits(scorer.model, split_rows(data, split, meta, 8192))
        vs = paired_gauc(scores, prior, labels, users)
        out[split] = {
            "rows": len(labels),
            "auc": roc_auc(scores, labels),
            "gauc": gauc(scores, labels, users)["gauc"],
            "gauc_vs_item_prior": {k: vs[k] for k in ("delta", "ci_low", "ci_high", "users")},
        }
    return out


def line(name: str, runs: list[dict]) -> str:
    def mean(split: str, *keys: str) -> float:
        values = []
        for r in runs:
            value = r[split]
            for key in keys:
                value = value[key]
            values.append(value)
        return float(np.mean(values))

    return f"{name:16s} seeds {len(runs)}  " + "  ".join(
        f"{split} AUC {mean(split, 'auc'):.4f} GAUC {mean(split, 'gauc'):.4f} "
        f"(vs item prior {mean(split, 'gauc_vs_item_prior', 'delta'):+.4f})"
        for split in ("val", "test")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.devwindows", description=__doc__.splitlines()[0]
    )
    p.add_argument("variants", nargs="+", type=variant, help='NAME={"plan field": value, ...}')
    p.add_argument("--seeds", default="0", help="comma-separated plan seeds (default 0)")
    p.add_argument(
        "--shift", type=int, default=28, help="days the window ends before the benchmark's"
    )
    p.add_argument("--scratch", default=str(SCRATCH.parent / "devwindows"), help="work folder")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    root = Path(args.scratch)
    fields = {f.name for f in dataclasses.fields(TrainPlan)}
    for name, overrides in args.variants:
        unknown = sorted(set(overrides) - fields)
        if unknown:
            p.error(
                f"variant {name}: {', '.join(unknown)} not a plan field ({', '.join(sorted(fields))})"
            )
    try:  # before the logs are fetched
        check_shift(args.shift)
    except ValueError as exc:
        p.error(str(exc))
    data = prepare(root, args.shift)
    results: dict[str, list[dict]] = {}
    for name, overrides in args.variants:
        for seed in seeds:
            checkpoint = train(data, root / f"{name}-seed{seed}", overrides, seed)
            run = {"variant": name, "seed": seed, "overrides": overrides, **judge(data, checkpoint)}
            results.setdefault(name, []).append(run)
            print(line(f"{name} seed {seed}", [run]), flush=True)
    print()
    for name, runs in results.items():
        print(line(name, runs))
    (root / "results.json").write_text(json.dumps({"shift": args.shift, "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
