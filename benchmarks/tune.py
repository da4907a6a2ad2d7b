"""Benchmark: ASHA pruning vs running every configuration to the end, over the SAME configurations.

On a small synthetic dataset (generated and preprocessed once under benchmarks/scratch/tune/):

1. N configurations are sampled once from the search space (Optuna's RandomSampler, seeded;
   architectures filtered by the estimate stage's memory model as in every search);
2. baseline: ``python -m components.tune --pruner none`` trains all N (random search over a
   fixed sample), each up to E epochs (the trainer's own early stopping, patience 3, applies
   to both arms alike);
3. ASHA: ``python -m components.tune --pruner asha`` (SuccessiveHalvingPruner, min resource
   1 epoch, reduction factor 4, the search's default) over the same N in the same order.

Both enqueue the same N parameter sets, so trial i is the same configuration in both arms,
and training is deterministic (seeded, one process, one thread): a trial's curve under ASHA
is the baseline's curve cut short (checked: ``curves_match``). The two arms run at the same
time as two processes (one core each on the 2-core VM); epochs, not seconds, are the cost.

Reported: the best validation AUC each arm reached, the training epochs each spent, their
ratio, and the target: ASHA's best within 0.005 of the baseline's best with <= 40% of its
epochs.

Trials run one after another, so what ASHA saves depends on the order the configurations
arrive in (a trial that is the best so far at a rung is always promoted). One order is one
draw; so the baseline's full curves are also replayed through the same Optuna pruner in
``ORDERS`` random orders, for reduction factors 2, 3 and 4: the spread of the epoch ratio and
how often the target holds. The replay of the measured order must reproduce the ASHA arm
exactly (``replay_matches``): that is what makes the replay a measurement too. Writes benchmarks/results/tune.json and the block ``<!-- bench:tune:start/end -->`` (docs/performance.md).

    python -m benchmarks.tune                       # the measurement (about 10 minutes on 2 cores)
    python -m benchmarks.tune --quick --no-readme      # tiny sizes, a smoke test (no published block)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.measure import machine
from benchmarks.readme import ROOT, publish
from components.common.dataset_meta import DatasetMeta
from components.common.schema import datagen_summary
from components.common.train_summary import TrainSummary
from components.tune.space import SearchSpace, suggest
from components.tune.study import (
    SUMMARY_FILE,
    TuneConfig,
    build_pruner,
    plan_base,
    report_epoch,
)

NAME = "tune"
TARGET_AUC_GAP, TARGET_EPOCH_RATIO = 0.005, 0.40
FULL = {
    # 27 = 3^3: enough configurations for three ASHA rungs at reduction factor 3 (with 12,
    # measured: 50% of the epochs; the few trials that lead at a rung run to the end)
    "configs": 27,
    "max_epochs": 9,
    "days": 6,
    "window": 4,
    "history": 2,
    "users": 1500,
    "items": 2500,
    "categories": 60,
    "events_per_day": 8000,
    "seq_len": 20,
    "global_batch": 512,
}
QUICK = {
    "configs": 4,
    "max_epochs": 3,
    "days": 4,
    "window": 3,
    "history": 1,
    "users": 300,
    "items": 500,
    "categories": 20,
    "events_per_day": 1500,
    "seq_len": 8,
    "global_batch": 256,
}
SPACE = SearchSpace(d_model=(8, 16), layers=(1, 2))
BASE_MODEL, SEED = "debug", 7
REDUCTION_FACTOR = TuneConfig.__dataclass_fields__["reduction_factor"].default
ORDERS, REPLAY_FACTORS = 200, (2, 3, 4)


def make_data(work: Path, size: dict) -> Path:
    """Synthetic logs -> preprocessed dataset, made once per size under ``work``."""
    from components.datagen import DatagenConfig, generate
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.stage import preprocess

    tag = "-".join(f"{k}{size[k]}" for k in ("days", "events_per_day", "users", "items", "seq_len"))
    raw, data = work / f"raw-{tag}", work / f"data-{tag}"
    if not (data / "meta.json").exists():
        if not datagen_summary(raw).is_file():
            generate(
                DatagenConfig(
                    out=raw,
                    days=size["days"],
                    users=size["users"],
                    items=size["items"],
                    categories=size["categories"],
                    events_per_day=size["events_per_day"],
                    seed=11,
                )
            )
        preprocess(
            PreprocessConfig(
                raw=str(raw),
                out=str(data),
                days=size["window"],
                history_days=size["history"],
                seq_len=size["seq_len"],
                item_buckets=1 << 13,
                category_buckets=1 << 8,
                user_buckets=1 << 12,
            )
        )
    return data


def sample_configs(config: TuneConfig, n: int, seed: int) -> list[dict]:
    """N parameter sets drawn once (RandomSampler) from the space the search itself would use."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    archs = plan_base(config).archs
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed)
    )
    return [suggest(study.ask(), config.space, archs) for _ in range(n)]


def _search_command(
    data: Path, out: Path, arm: str, pruner: str, size: dict, trials: int, enqueue: Path
) -> list[str]:
    """The search CLI of one arm: the same enqueued configurations, its own pruner."""
    return [
        sys.executable,
        "-m",
        "components.tune",
        "--data",
        str(data),
        "--out",
        str(out),
        "--base-model",
        BASE_MODEL,
        "--hardware",
        "cpu-local",
        "--global-batch",
        str(size["global_batch"]),
        "--max-epochs",
        str(size["max_epochs"]),
        "--trials",
        str(trials),
        "--pruner",
        pruner,
        "--min-epochs",
        "1",
        "--reduction-factor",
        str(REDUCTION_FACTOR),
        "--sampler",
        "random",
        "--seed",
        str(SEED),
        "--space",
        json.dumps(SPACE.as_dict()),
        "--enqueue",
        str(enqueue),
        "--storage",
        "memory",
        "--fresh",
        "--study-name",
        f"bench-{arm}",
    ]


def _arm_result(work: Path, arm: str, code: int, seconds: float) -> dict:
    """One arm's search summary with its wall time (its log's tail if it failed)."""
    if code != 0:
        tail = (work / f"{arm}.log").read_text()[-3000:]
        raise SystemExit(f"python -m benchmarks.tune: the {arm} search failed ({code}):\n{tail}")
    summary = json.loads((work / arm / SUMMARY_FILE).read_text())
    print(
        f"{arm:8s}: {summary['trials']} trials, {summary['pruned']} pruned, "
        f"{summary['epochs_spent']} epochs, "
        f"best val AUC {summary['best_val_auc']:.4f}, {seconds:.0f}s",
        flush=True,
    )
    return {**summary, "wall_seconds": round(seconds, 1)}


def run_arms(data: Path, work: Path, size: dict, configs: list[dict]) -> dict[str, dict]:
    """The baseline and ASHA searches as two concurrent CLI processes; their summaries."""
    enqueue = work / "configs.json"
    enqueue.write_text(json.dumps(configs, indent=1))
    procs, logs = {}, {}
    for arm, pruner in (("baseline", "none"), ("asha", "asha")):
        out = work / arm
        cmd = _search_command(data, out, arm, pruner, size, len(configs), enqueue)
        logs[arm] = open(work / f"{arm}.log", "w")  # noqa: SIM115 (closed below)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs[arm] = (
            subprocess.Popen(cmd, stdout=logs[arm], stderr=subprocess.STDOUT, cwd=ROOT, env=env),
            time.perf_counter(),
        )
    ended: dict[str, float] = {}
    while len(ended) < len(procs):  # each arm's own end time, whichever finishes first
        for arm, (proc, _) in procs.items():
            if arm not in ended and proc.poll() is not None:
                ended[arm] = time.perf_counter()
        time.sleep(0.2)
    for log in logs.values():
        log.close()
    return {
        arm: _arm_result(work, arm, proc.returncode, ended[arm] - started)
        for arm, (proc, started) in procs.items()
    }


def train_summaries(work: Path, arm: str) -> dict[int, TrainSummary]:
    """Per trial number, the trainer's train_summary.json of that trial."""
    return {
        int(path.parts[-3]): TrainSummary.read(path)
        for path in sorted((work / arm / "trials").glob("*/train/train_summary.json"))
    }


def curves(summaries: dict[int, TrainSummary]) -> dict[int, list[float]]:
    """Per trial, its validation AUC after each epoch."""
    return {t: [r["val_auc"] for r in s.history] for t, s in summaries.items()}


def replay(
    curves: dict[int, list[float]],
    order: list[int],
    config: TuneConfig,
    objectives: dict[int, float] | None = None,
) -> dict:
    """The search's pruner and per-epoch rule run over known full curves, configurations in
    ``order``: the epochs each would train and the best complete value. ``objectives``: what a
    complete trial returns (the trainer's best_val_auc, which counts an improvement only beyond
    its min delta); by default the curve's maximum."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=build_pruner(config))
    epochs_of, best = {}, -math.inf
    for number in order:
        trial, curve, top = study.ask(), curves[number], -math.inf
        for epochs, auc in enumerate(curve, 1):
            top = max(top, auc)
            if epochs == len(curve):  # as tune(): the last epoch is reported, never judged
                trial.report(top, epochs)
            elif report_epoch(trial, top, epochs, config.max_epochs):
                study.tell(trial, state=TrialState.PRUNED)
                break
        else:
            value = objectives[number] if objectives else top
            study.tell(trial, value)
            best = max(best, value)
        epochs_of[number] = epochs
    return {"epochs": sum(epochs_of.values()), "best": best, "epochs_of": epochs_of}


def replay_orders(
    curves: dict[int, list[float]],
    config: TuneConfig,
    orders: int,
    objectives: dict[int, float] | None = None,
) -> list[dict]:
    """Per reduction factor, the ASHA search replayed in ``orders`` seeded random orders."""
    spent = sum(len(c) for c in curves.values())
    top = max((objectives or {t: max(c) for t, c in curves.items()}).values())
    rng = random.Random(SEED)
    shuffled = [rng.sample(sorted(curves), len(curves)) for _ in range(orders)]
    rows = []
    for factor in REPLAY_FACTORS:
        arm = replace(config, pruner="asha", reduction_factor=factor)
        runs = [replay(curves, order, arm, objectives) for order in shuffled]
        ratios = sorted(r["epochs"] / spent for r in runs)
        met = [
            r["epochs"] / spent <= TARGET_EPOCH_RATIO and top - r["best"] <= TARGET_AUC_GAP
            for r in runs
        ]
        measured = replay(curves, sorted(curves), arm, objectives)
        rows.append(
            {
                "reduction_factor": factor,
                "orders": orders,
                "epochs_ratio_median": round(statistics.median(ratios), 4),
                "epochs_ratio_p10": round(ratios[len(ratios) // 10], 4),
                "epochs_ratio_p90": round(ratios[len(ratios) * 9 // 10], 4),
                "auc_gap_max": round(top - min(r["best"] for r in runs), 5),
                "target_met_share": round(sum(met) / len(met), 4),
                "measured_order_ratio": round(measured["epochs"] / spent, 4),
            }
        )
    return rows


def summarize(
    work: Path, arms: dict[str, dict], configs: list[dict], size: dict, config: TuneConfig
) -> dict:
    base, asha = arms["baseline"], arms["asha"]
    base_runs = train_summaries(work, "baseline")
    base_curves, asha_curves = curves(base_runs), curves(train_summaries(work, "asha"))
    asha_config = replace(config, pruner="asha", reduction_factor=REDUCTION_FACTOR)
    objectives = {t: s.best_val_auc for t, s in base_runs.items()}
    measured = replay(base_curves, sorted(base_curves), asha_config, objectives)
    diffs = [
        abs(a - b)
        for t, c in asha_curves.items()
        for a, b in zip(c, base_curves.get(t, []), strict=False)
    ]
    rows = []
    for t, params in enumerate(configs):
        b, a = base_curves.get(t, []), asha_curves.get(t, [])
        state = next((r["state"] for r in asha["trial_rows"] if r["trial"] == t), None)
        rows.append(
            {
                "trial": t,
                "params": params,
                "baseline_epochs": len(b),
                "baseline_best_val_auc": max(b) if b else None,
                "asha_epochs": len(a),
                "asha_best_val_auc": max(a) if a else None,
                "asha_state": state,
            }
        )
    gap = base["best_val_auc"] - asha["best_val_auc"]
    ratio = asha["epochs_spent"] / base["epochs_spent"]
    return {
        "configs": len(configs),
        "max_epochs": size["max_epochs"],
        "reduction_factor": REDUCTION_FACTOR,
        "baseline_best_val_auc": base["best_val_auc"],
        "asha_best_val_auc": asha["best_val_auc"],
        "baseline_best_trial": base["best_trial"],
        "asha_best_trial": asha["best_trial"],
        "baseline_epochs": base["epochs_spent"],
        "asha_epochs": asha["epochs_spent"],
        "epochs_ratio": round(ratio, 4),
        "auc_gap": round(gap, 5),
        "asha_pruned": asha["pruned"],
        "baseline_early_stopped": sum(r["baseline_epochs"] < size["max_epochs"] for r in rows),
        "curves_match": bool(diffs) and max(diffs) < 1e-9,
        "curves_max_abs_diff": max(diffs) if diffs else None,
        "replay_matches": measured["epochs_of"] == {t: len(c) for t, c in asha_curves.items()}
        and math.isclose(measured["best"], asha["best_val_auc"], abs_tol=1e-12),
        "replay": replay_orders(base_curves, asha_config, ORDERS, objectives),
        "target_auc_gap": TARGET_AUC_GAP,
        "target_epoch_ratio": TARGET_EPOCH_RATIO,
        "auc_within_target": gap <= TARGET_AUC_GAP,
        "epochs_within_target": ratio <= TARGET_EPOCH_RATIO,
        "target_met": gap <= TARGET_AUC_GAP and ratio <= TARGET_EPOCH_RATIO,
        "per_config": rows,
    }


def spent_by_outcome(rows: list[dict]) -> str:
    """'4 trials ran to the end (35 epochs), 6 were pruned after 1 epoch, ...' from per_config."""
    done = [r["asha_epochs"] for r in rows if r["asha_state"] == "complete"]
    parts = [
        f"{len(done)} trial(s) not pruned ({sum(done)} epochs; trials in the order sampled, "
        f"and a trial that is the best so far at a rung is never pruned)"
    ]
    pruned: dict[int, int] = {}
    for r in rows:
        if r["asha_state"] == "pruned":
            pruned[r["asha_epochs"]] = pruned.get(r["asha_epochs"], 0) + 1
    parts += [f"{n} pruned after {e} epoch(s)" for e, n in sorted(pruned.items())]
    return "; ".join(parts)


def readme_table(result: dict) -> str:
    m, d, s, arms = result["machine"], result["dataset"], result["summary"], result["arms"]
    lines = [
        f"Measured by `python -m benchmarks.tune` on {m['cpus']} cores "
        f"({m.get('cpu_model', 'CPU')}), {m['memory_gib']} GiB RAM; `{BASE_MODEL}`-based "
        f"architectures (d_model {list(SPACE.d_model)} x layers {list(SPACE.layers)}), "
        f"{d['train_rows']:,} training / {d['val_rows']:,} validation rows, global batch "
        f"{result['size']['global_batch']}; the same {s['configs']} sampled configurations in both "
        f"arms, at most {s['max_epochs']} epochs each; the two searches ran concurrently, one "
        "core each (seconds: each search's own, from its summary).",
        "",
        "| search | trials | pruned | epochs trained | best val AUC | best trial | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, label in (
        ("baseline", "every configuration to the end (random search)"),
        ("asha", f"ASHA (min 1 epoch, reduction factor {s['reduction_factor']})"),
    ):
        a = arms[arm]
        lines.append(
            f"| {label} | {a['trials']} | {a['pruned']} | {a['epochs_spent']} | "
            f"{a['best_val_auc']:.4f} | "
            f"{a['best_trial']} | {a['seconds']:.0f} |"
        )
    lines += [
        "",
        f"- epochs ASHA spent (goal: <= {TARGET_EPOCH_RATIO:.0%} of the baseline's; measured: "
        f"**{s['epochs_ratio']:.0%}**, {s['asha_epochs']} vs {s['baseline_epochs']}); best validation "
        f"AUC, baseline minus ASHA (goal: <= {TARGET_AUC_GAP}; measured: **{s['auc_gap']:+.4f}**)",
        f"- where ASHA's epochs went: {spent_by_outcome(s['per_config'])}",
        f"- a trial's curve under ASHA equals the baseline's for the epochs it ran: "
        f"{'yes' if s['curves_match'] else 'no'} (max |difference| {s['curves_max_abs_diff']})",
        "",
        f"One order of arrival is one draw: a trial that is the best so far at a rung is always "
        f"promoted. The baseline's full curves replayed through the same Optuna pruner in "
        f"{s['replay'][0]['orders']} random orders (the replay of the measured order reproduces "
        f"the ASHA arm epoch for epoch: {'yes' if s['replay_matches'] else 'no'}):",
        "",
        "| reduction factor | epochs vs baseline: median (10th-90th percentile) | "
        "measured order | worst AUC gap | orders within both goals |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['reduction_factor']} | {r['epochs_ratio_median']:.0%} "
        f"({r['epochs_ratio_p10']:.0%}-{r['epochs_ratio_p90']:.0%}) | "
        f"{r['measured_order_ratio']:.0%} | {r['auc_gap_max']:.4f} | {r['target_met_share']:.0%} |"
        for r in s["replay"]
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.tune", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--quick", action="store_true", help="tiny sizes: a smoke test, not a measurement"
    )
    p.add_argument("--work", default=str(ROOT / "benchmarks" / "scratch" / "tune"))
    p.add_argument(
        "--results", default=None, help="JSON output (default: benchmarks/results/tune.json)"
    )
    p.add_argument("--no-readme", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    size = QUICK if args.quick else FULL
    work = Path(args.work) / ("quick" if args.quick else "full")
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    data = make_data(Path(args.work), size)
    meta = DatasetMeta.read(data, splits=())
    config = TuneConfig(
        data=str(data),
        out=str(work / "sample"),
        base_model=BASE_MODEL,
        hardware="cpu-local",
        global_batch=size["global_batch"],
        max_epochs=size["max_epochs"],
        space=SPACE,
    )
    configs = sample_configs(config, size["configs"], SEED)
    print(
        f"{len(configs)} configurations sampled; baseline and ASHA searches running "
        f"(logs in {work})",
        flush=True,
    )
    arms = run_arms(data, work, size, configs)
    summary = summarize(work, arms, configs, size, config)
    result = {
        "benchmark": NAME,
        "quick": args.quick,
        "machine": machine(),
        "size": size,
        "space": SPACE.as_dict(),
        "base_model": BASE_MODEL,
        "seed": SEED,
        "dataset": {
            "train_rows": meta.split("train").rows,
            "val_rows": meta.split("val").rows,
            "fingerprint": meta.fingerprint,
        },
        "arms": {arm: {k: v for k, v in a.items() if k != "settings"} for arm, a in arms.items()},
        "summary": summary,
        "seconds": round(time.perf_counter() - started, 1),
    }
    publish(
        NAME,
        result,
        readme_table(result),
        args.results,
        throwaway=args.quick,
        readme=not args.no_readme,
    )
    print(
        f"target (ASHA best within {TARGET_AUC_GAP} of the baseline's, "
        f"<= {TARGET_EPOCH_RATIO:.0%} of its "
        f"epochs): {'met' if summary['target_met'] else 'NOT met'}; {result['seconds']:.0f}s in all"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
