"""Benchmark: the daily model against what a practitioner would fit instead, same rows, same split.

For each world -- the ``make run`` sample logs, a second synthetic world with
another seed and 3x the events per day, and real public logs (MovieLens-100K,
``benchmarks.movielens``: four weeks of test, four of validation) -- in one run:

1. the pipeline's preprocess stage (the window of ``configs/local.json``);
2. **dailyrec**: the pipeline's own plan for the ``local`` config on this
   machine's profile (the estimate stage, ``max_epochs`` from the config), the
   pipeline's launcher (torchrun) and trainer, then the best checkpoint scores
   the test split exactly as the evaluate stage does;
3. baselines on the same dataset's arrays, the same split:

   * **LightGBM** on tabular features: the dataset's causal count features
     (``DENSE_FEATURES``) plus features a practitioner derives from the
     sequences (target item in the click history, category matches in the click
     history, gap bucket of the last click, history length, the same two counts
     over the skipped exposures, hour, weekday), early-stopped on val;
   * **logistic regression** on the same features, standardized;
   * **item popularity**: the item's smoothed click rate so far (a count feature);
   * **oracle** (synthetic data only, for this report): the generator's true
     click probability from its ``_truth`` sidecar. Nothing that trains reads it;
   * **data-limited oracle** (the same, for this report): the oracle with each item's
     hidden quality and each user's hidden click bias replaced by what the impressions
     before the row can reveal of them (their Bayes estimate, ``data_limited_oracle``). It
     still knows every other effect exactly, so it is a generous ceiling (in a Gaussian
     approximation) for any model of these logs; its distance from the oracle is the part
     of the oracle gap that the logs cannot close.

Reported per world: test AUC, GAUC and logloss of each; dailyrec's test AUC as
served (the evaluate stage scoring the test split with serving's own code) and
the train-serve skew; dailyrec minus the best
baseline's AUC with the paired 95% interval, users as the unit; the gap to the oracle; and
the **headroom** of dailyrec and LightGBM: the test AUC that a logistic
regression stacked on the model's logit gains (``stacked_gain``) from

* each user's and each item's offset as their earlier rows reveal it against a
  LightGBM blind to that user or item (``blind_offsets``: the efficient estimate
  of a per-user or per-item effect from the logs; near 0 when the model already
  extracts what the logs tell of them);
* on synthetic logs, the oracle's logit without the hidden item quality and user
  bias (``known_effects``: every effect the logs could reveal exactly; what a
  perfect model of everything else would add).
Goals: AUC >= best baseline + 0.005 with the interval above 0 on both
worlds, and within 0.02 of the oracle on the ``make run`` world.

    python -m benchmarks.quality                 # both worlds (tens of minutes on 2 cores)
    python -m benchmarks.quality --quick         # tiny world, 1 epoch: a smoke test

LightGBM is a benchmark dependency (``pip install -e '.[bench]'``), never a
pipeline one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks import snapshot_time
from benchmarks.measure import machine
from benchmarks.readme import NO_README_HELP, publish
from benchmarks.worlds import (
    CONFIG,
    QUICK,
    SCRATCH,
    WORLDS,
    World,
    prepare,
    train_dailyrec,
)
from components.common.dataset import DENSE_FEATURES
from components.common.dataset_meta import DatasetMeta
from components.common.schema import ITEM_ID, USER_ID
from components.datagen.generator import written
from components.datagen.hidden import HiddenEffects, id_index
from components.evaluate.metrics import clustered_delong, paired_gauc, summarize
from pipelines.parameters import DEFAULTS

NAME = "quality"
MARGIN, ORACLE_GAP = 0.005, 0.02
BASELINES = ("lightgbm", "logistic", "item_popularity")
ORACLES = ("oracle_data_limited", "oracle")


# ----------------------------------------------------------------------------- features


def tabular(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """The baselines' feature matrix: count features plus sequence-derived ones."""
    hist_item, hist_cat, neg_item, neg_cat = (
        arrays[k] for k in ("hist_item", "hist_cat", "neg_item", "neg_cat")
    )
    target_item, target_cat = arrays["target_item"][:, None], arrays["target_cat"][:, None]
    derived = {
        "target_in_history": ((hist_item == target_item) & (hist_item > 0)).sum(1),
        "category_matches_in_history": ((hist_cat == target_cat) & (hist_cat > 0)).sum(1),
        "last_click_gap_bucket": arrays["hist_gap"][:, -1],
        "history_length": arrays["hist_len"],
        "target_in_skipped": ((neg_item == target_item) & (neg_item > 0)).sum(1),
        "category_matches_in_skipped": ((neg_cat == target_cat) & (neg_cat > 0)).sum(1),
        "hour": arrays["context"][:, 0],
        "weekday": arrays["context"][:, 1],
    }
    matrix = np.column_stack([arrays["dense"], *derived.values()]).astype(np.float32)
    return matrix, [*DENSE_FEATURES, *derived]


def split_arrays(data: Path, split: str) -> dict[str, np.ndarray]:
    names = (
        "hist_item",
        "hist_cat",
        "hist_gap",
        "hist_len",
        "neg_item",
        "neg_cat",
        "dense",
        "target_item",
        "target_cat",
        "context",
        "label",
        "user_key",
        "ts",
    )
    return {n: np.load(data / split / f"{n}.npy", mmap_mode="r") for n in names}


def lightgbm_model(train, val):
    """LightGBM fitted on ``train`` (features, labels), early-stopped on ``val``'s AUC."""
    import lightgbm as lgb

    (x_tr, y_tr), (x_va, y_va) = train, val
    model = lgb.LGBMClassifier(
        n_estimators=2000,
        learning_rate=0.05,
        num_leaves=63,
        min_child_samples=100,
        subsample=0.8,
        subsample_freq=1,
        colsample_bytree=0.8,
        verbose=-1,
        n_jobs=2,
    )
    model.fit(
        x_tr,
        y_tr,
        eval_X=(x_va,),
        eval_y=(y_va,),
        eval_metric="auc",
        callbacks=[lgb.early_stopping(50, verbose=False)],
    )
    return model


def lightgbm_scores(train, val, test) -> tuple[np.ndarray, dict]:
    model = lightgbm_model(train, val)
    return model.predict_proba(test[0])[:, 1], {"trees": int(model.best_iteration_)}


def logistic_scores(train, val, test) -> tuple[np.ndarray, dict]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    (x_tr, y_tr), _, (x_te, _) = train, val, test
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    model.fit(x_tr, y_tr)
    return model.predict_proba(x_te)[:, 1], {}


def truth_rows(raw: Path, data: Path, test: dict[str, np.ndarray]) -> pd.DataFrame | None:
    """Per test row (in order): the generator's true ``p`` and the raw item and user ids,
    joined on user, time and label; None where the world has no ``_truth`` sidecar."""
    from components.common.hashing import hash_ids

    day = DatasetMeta.read(data, splits=()).window.end
    truth_files = sorted((raw / "_truth" / f"dt={day}").glob("*.parquet"))
    if not truth_files:
        return None
    raws = [pd.read_parquet(f) for f in sorted((raw / f"dt={day}").glob("*.parquet"))]
    frame = pd.concat(raws, ignore_index=True)
    frame["p"] = pd.concat([pd.read_parquet(f) for f in truth_files], ignore_index=True)["p"]
    frame["user_key"] = hash_ids(frame["user_id"].to_numpy())[0]
    frame["ts"] = frame["timestamp"].astype(np.int64)
    key = ["user_key", "ts", "label"]
    rows = pd.DataFrame(
        {
            "user_key": test["user_key"],
            "ts": test["ts"],
            "label": test["label"].astype(frame["label"].dtype),
            "order": np.arange(len(test["ts"])),
        }
    )
    # (user, second, label) is unique but for a handful of rows: average p there (and keep
    # the first of their items)
    truth = frame.groupby(key, as_index=False).agg(
        p=("p", "mean"), item_id=("item_id", "first"), user_id=("user_id", "first")
    )
    joined = rows.merge(truth, on=key, how="left").sort_values("order")
    if joined["p"].isna().any():
        return None
    return joined.reset_index(drop=True)


def _hidden_terms(truth: pd.DataFrame, dense: np.ndarray, hidden: HiddenEffects):
    """Per hidden effect (item quality, user noise): its value on each row, its prior sd, the
    effect's index per row, and the impressions of its item or user before the row."""
    for effect, sd, ids, column, feature in (
        (hidden.item_quality, hidden.quality_sd, truth["item_id"], ITEM_ID, "item_log_impressions"),
        (hidden.user_noise, hidden.noise_sd, truth["user_id"], USER_ID, "user_log_impressions"),
    ):
        index = id_index(ids.to_numpy(), column)
        impressions = np.expm1(np.asarray(dense[:, DENSE_FEATURES.index(feature)], np.float64))
        yield effect, sd, index, impressions


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, np.float64)
    return np.log(p) - np.log1p(-p)


def data_limited_oracle(
    truth: pd.DataFrame, dense: np.ndarray, hidden: HiddenEffects, seed: int = 0
) -> np.ndarray:
    """The oracle with each item's quality and each user's bias known only as well as the
    impressions before the row reveal: their Bayes estimate (Gaussian prior of the generator's
    sd, Fisher information p(1-p) per impression) drawn once per item and user. It still knows
    everything else exactly, so it is a generous ceiling for any model of these logs."""
    p = truth["p"].to_numpy(np.float64)
    logit = _logit(p)
    information = float((p * (1 - p)).mean())
    rng = np.random.default_rng(seed)
    for effect, sd, index, impressions in _hidden_terms(truth, dense, hidden):
        noise_var = 1.0 / np.maximum(impressions * information, 1e-12)
        shrink = sd**2 / (sd**2 + noise_var)
        true = effect[index]
        seen = true + rng.standard_normal(len(effect))[index] * np.sqrt(noise_var)
        logit += shrink * seen - true
    return 1.0 / (1.0 + np.exp(-logit))


# ----------------------------------------------------------------------------- headroom

OFFSET_PRIOR_SD = 0.5
"""Prior sd of a user's or item's logit offset in :func:`earlier_offsets` (the stacking
regression rescales the offset; 0.35 and 0.5 measured the same)."""
ENTITIES = {"user": ("user_key", ("user_", "history_length")), "item": ("target_item", ("item_",))}
"""Entity -> (its key array, the prefixes of the tabular features a model blind to it drops)."""
HEADROOM = ("offsets", "known_effects", "known_user_level", "known_within_user")
"""The headroom gains per model, in the report's column order (the last three: synthetic only)."""


def earlier_offsets(
    keys: np.ndarray,
    ts: np.ndarray,
    residual: np.ndarray,
    weight: np.ndarray,
    prior_sd: float = OFFSET_PRIOR_SD,
) -> np.ndarray:
    """Per row: its key's logit offset as the rows strictly earlier in time reveal it, one
    Newton step from 0 under a Gaussian prior: sum(residual) / (sum(weight) + 1 / prior_sd**2)
    over those rows, with residual = label - p and weight = p (1 - p) of a model that does not
    know the key (the efficient estimate of a random effect). Rows sharing a time never see
    each other."""
    frame = pd.DataFrame({"key": keys, "ts": ts, "r": residual, "w": weight})
    # sorted by key, then time: a cumulative sum within a key runs forward in time
    groups = frame.groupby(["key", "ts"], as_index=False, sort=True)[["r", "w"]].sum()
    before = groups.groupby("key")[["r", "w"]].cumsum() - groups[["r", "w"]]
    groups["offset"] = before["r"] / (before["w"] + 1.0 / prior_sd**2)
    # a left merge keeps the rows' order
    return frame[["key", "ts"]].merge(groups, on=["key", "ts"], how="left")["offset"].to_numpy()


def stacked_gain(logit: np.ndarray, features: list[np.ndarray], labels: np.ndarray) -> float:
    """Test AUC a logistic regression on ``logit`` and ``features`` gains over one on ``logit``
    alone, each fitted on one half of the rows and scored on the other (both ways): how much
    of what the features hold the model's score lacks."""
    from sklearn.linear_model import LogisticRegression

    from components.common.metrics import roc_auc

    labels = np.asarray(labels).astype(int)
    half = len(labels) // 2
    folds = ((slice(0, half), slice(half, None)), (slice(half, None), slice(0, half)))

    def auc(x: np.ndarray) -> float:
        scores = np.empty(len(labels))
        for fit, score in folds:
            regression = LogisticRegression(max_iter=1000).fit(x[fit], labels[fit])
            scores[score] = regression.decision_function(x[score])
        return roc_auc(scores, labels)

    logit = np.asarray(logit, np.float64)[:, None]
    return auc(np.column_stack([logit, *features])) - auc(logit)


def blind_offsets(
    splits: dict[str, dict[str, np.ndarray]],
    xy: dict[str, tuple[np.ndarray, np.ndarray]],
    names: list[str],
    entity: str,
) -> np.ndarray:
    """The test rows' ``earlier_offsets`` of their user or item (``entity``) against LightGBM
    fitted without that entity's features (``xy``: each split's ``tabular`` matrix, columns
    ``names``, and labels); every earlier row of every split counts."""
    key, prefixes = ENTITIES[entity]
    keep = [i for i, n in enumerate(names) if not n.startswith(prefixes)]
    blind = {name: (matrix[:, keep], labels) for name, (matrix, labels) in xy.items()}
    model = lightgbm_model(blind["train"], blind["val"])
    columns = {"keys": [], "ts": [], "residual": [], "weight": []}
    for name in ("train", "val", "test"):  # in time order
        matrix, labels = blind[name]
        p = model.predict_proba(matrix)[:, 1]
        columns["keys"].append(np.asarray(splits[name][key]))
        columns["ts"].append(np.asarray(splits[name]["ts"]))
        columns["residual"].append(labels - p)
        columns["weight"].append(p * (1 - p))
    offsets = earlier_offsets(**{k: np.concatenate(v) for k, v in columns.items()})
    return offsets[-len(splits["test"]["label"]) :]


def known_effects(truth: pd.DataFrame, dense: np.ndarray, hidden: HiddenEffects) -> np.ndarray:
    """The oracle's logit less each item's hidden quality and each user's hidden bias: every
    effect of the generator that the logs could reveal exactly (favourite categories, recency,
    hour, popularity, activity)."""
    logit = _logit(truth["p"].to_numpy())
    for effect, _, index, _ in _hidden_terms(truth, dense, hidden):
        logit -= effect[index]
    return logit


# ----------------------------------------------------------------------------- dailyrec


# ----------------------------------------------------------------------------- run


def measure_world(world: World, root: Path, epochs: int) -> dict:
    raw, data = prepare(world, root)
    train, val, test = (split_arrays(data, s) for s in ("train", "val", "test"))
    splits = {"train": train, "val": val, "test": test}
    tables = {name: tabular(a) for name, a in splits.items()}
    xy = {name: (tables[name][0], np.asarray(a["label"])) for name, a in splits.items()}
    labels, users = np.asarray(test["label"]), np.asarray(test["user_key"])
    scores, extra = {}, {}
    started = time.perf_counter()
    scores["lightgbm"], extra["lightgbm"] = lightgbm_scores(xy["train"], xy["val"], xy["test"])
    extra["lightgbm"]["seconds"] = round(time.perf_counter() - started, 1)
    scores["logistic"], extra["logistic"] = logistic_scores(xy["train"], xy["val"], xy["test"])
    column = DENSE_FEATURES.index("item_click_logit")
    scores["item_popularity"] = 1 / (1 + np.exp(-np.asarray(test["dense"][:, column], np.float64)))
    # as the daily pipeline trains: its sampling of the negatives
    scores["dailyrec"], extra["dailyrec"] = train_dailyrec(
        data,
        root / world.name,
        epochs,
        DEFAULTS["negative_keep"],
        negatives_per_positive=DEFAULTS["negatives_per_positive"],
        snapshot_times=True,
    )
    truth = truth_rows(raw, data, test)
    if truth is not None:
        scores["oracle"] = truth["p"].to_numpy()
        hidden = HiddenEffects.of(written(raw))
        scores["oracle_data_limited"] = data_limited_oracle(truth, test["dense"], hidden)
    models = {
        name: {**summarize(s, labels, users), **extra.get(name, {})} for name, s in scores.items()
    }
    best = max(BASELINES, key=lambda n: models[n]["auc"])
    test_delong = clustered_delong(scores["dailyrec"], scores[best], labels, users)
    result = {
        "world": {**asdict(world), "source": world.source},
        "rows": {s: len(a["label"]) for s, a in (("train", train), ("val", val), ("test", test))},
        "models": models,
        "best_baseline": best,
        "vs_best_baseline": {
            **{k: test_delong[k] for k in ("delta", "ci_low", "ci_high", "p_value", "users")},
            "iid": {k: test_delong["iid"][k] for k in ("ci_low", "ci_high")},
        },
        "gauc_vs_baselines": gauc_comparisons(scores, labels, users),
    }
    if truth is not None:
        result["oracle_gap"] = models["oracle"]["auc"] - models["dailyrec"]["auc"]
        result["data_limited_gap"] = (
            models["oracle_data_limited"]["auc"] - models["dailyrec"]["auc"]
        )
    result["margin_met"] = bool(test_delong["delta"] >= MARGIN and test_delong["ci_low"] > 0)
    result["headroom"] = headroom(
        splits,
        xy,
        tables["train"][1],
        {n: scores[n] for n in ("dailyrec", "lightgbm")},
        None if truth is None else known_effects(truth, test["dense"], hidden),
    )
    return result


def gauc_comparisons(scores: dict[str, np.ndarray], labels, users) -> dict[str, dict]:
    """dailyrec's GAUC minus each baseline's, with the interval (users as the unit): the ranking
    of one user's items, where a feed competes."""
    keep = ("delta", "ci_low", "ci_high", "p_value", "users")
    return {
        name: {
            k: v
            for k, v in paired_gauc(scores["dailyrec"], scores[name], labels, users).items()
            if k in keep
        }
        for name in BASELINES
    }


def headroom(
    splits: dict[str, dict[str, np.ndarray]],
    xy: dict[str, tuple[np.ndarray, np.ndarray]],
    names: list[str],
    scores: dict[str, np.ndarray],
    known: np.ndarray | None,
) -> dict[str, dict[str, float]]:
    """Per model: the test AUC that stacking gains over its score (``stacked_gain``) with the
    users' and items' offsets the earlier rows reveal (``blind_offsets``), and, on synthetic
    logs, with every effect but the hidden ones (``known_effects``), also split in two: each
    user's mean of it over the test day (a level per user, as noisy clicks reveal it slowly)
    and what is left of it within a user (which item, category, time and recency)."""
    labels = np.asarray(splits["test"]["label"])
    offsets = [blind_offsets(splits, xy, names, entity) for entity in ENTITIES]
    parts = {}
    if known is not None:
        level = pd.Series(known).groupby(np.asarray(splits["test"]["user_key"])).transform("mean")
        level = level.to_numpy()
        parts = dict(zip(HEADROOM[1:], (known, level, known - level), strict=True))
    out = {}
    for name, s in scores.items():
        logit = _logit(np.clip(s, 1e-7, 1 - 1e-7))
        out[name] = {HEADROOM[0]: stacked_gain(logit, offsets, labels)}
        out[name].update({part: stacked_gain(logit, [x], labels) for part, x in parts.items()})
    return out


def _model_table(results: list[dict], host: dict) -> list[str]:
    """Each model's test AUC, GAUC and logloss, per world."""
    lines = [
        f"Test AUC / GAUC / logloss, same rows and split per world ({host['cpus']} x "
        f"{host['cpu_model']}). Goal: dailyrec >= best baseline + {MARGIN} with the "
        f"95% interval above 0 (users as the unit); within {ORACLE_GAP} of the oracle on the "
        "make-run world.",
        "",
        "| world | train rows | model | AUC | GAUC | logloss |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        # a fixed order: the stored results file keeps the models sorted by name
        for name in [n for n in (*BASELINES, "dailyrec", *ORACLES) if n in r["models"]]:
            m = r["models"][name]
            lines.append(
                f"| {r['world']['name']} | {r['rows']['train']:,} | {name} | {m['auc']:.4f} "
                f"| {m['gauc']:.4f} | {m['logloss']:.4f} |"
            )
    return lines


def _margin_table(results: list[dict]) -> list[str]:
    """dailyrec against the best baseline and the oracles, per world."""
    lines = [
        f"| world | dailyrec - best baseline (95% CI, users as the unit) | oracle gap | data-limited oracle gap | "
        f">= +{MARGIN} with the interval above 0 |",
        "|---|---|---:|---:|---|",
    ]
    for r in results:
        v = r["vs_best_baseline"]
        gap, limited = (
            f"{r[k]:.4f}" if k in r else "n/a" for k in ("oracle_gap", "data_limited_gap")
        )
        lines.append(
            f"| {r['world']['name']} | {v['delta']:+.4f} vs {r['best_baseline']} "
            f"({v['ci_low']:+.4f} .. {v['ci_high']:+.4f}) | {gap} | {limited} | "
            f"{'yes' if r['margin_met'] else 'no'} |"
        )
    return lines


def _gauc_table(results: list[dict]) -> list[str]:
    """GAUC: dailyrec minus each baseline, per world."""
    lines = [
        "GAUC, the ranking of one user's items: dailyrec minus each baseline (95% CI, users "
        "as the unit: the per-user AUC differences, weighted by rows).",
        "",
        f"| world | users | {' | '.join(f'vs {n}' for n in BASELINES)} |",
        f"|---|---:|{'---|' * len(BASELINES)}",
    ]
    for r in results:
        vs = r.get("gauc_vs_baselines")
        if vs:
            cells = [
                f"{vs[n]['delta']:+.4f} ({vs[n]['ci_low']:+.4f} .. {vs[n]['ci_high']:+.4f})"
                for n in BASELINES
            ]
            users = vs[BASELINES[0]]["users"]
            lines.append(f"| {r['world']['name']} | {users:,} | {' | '.join(cells)} |")
    return lines


def _served_table(results: list[dict]) -> list[str]:
    """dailyrec as served against the dataset's features, per world."""
    lines = [
        "dailyrec as served: the evaluate stage builds each test row with serving's own code "
        "from the state at the start of the row's day (a split of several days is served one "
        "day at a time, as the daily pipeline serves it), with each user's earlier events of "
        "the day sent along, as a caller does, or from the snapshot alone; the skew is the "
        "test AUC on the dataset's features minus the served one (95% CI, users as the unit).",
        "",
        "| world | source | test AUC | as served | train-serve skew (95% CI) | snapshot alone |",
        "|---|---|---:|---:|---|---:|",
    ]
    for r in results:
        served = r["models"]["dailyrec"].get("served")
        if served:
            skew = served["skew"]
            lines.append(
                f"| {r['world']['name']} | {r['world'].get('source', 'synthetic')} "
                f"| {r['models']['dailyrec']['auc']:.4f} | {served['auc']:.4f} "
                f"| {skew['delta']:+.4f} ({skew['ci_low']:+.4f} .. {skew['ci_high']:+.4f}) "
                f"| {served['snapshot_only_auc']:.4f} |"
            )
    return lines


def _headroom_table(results: list[dict]) -> list[str]:
    """Headroom: what a stacked regression gains on top of each model, per world."""
    lines = [
        "Headroom: test AUC a logistic regression stacked on the model's logit gains (fitted on "
        "one half of the test rows, scored on the other) from each user's and item's offset "
        "that their earlier rows reveal against a LightGBM blind to them, and (synthetic "
        "logs) from the oracle's logit without the hidden item quality and user bias, also "
        "split into each user's mean of it over the test day and the rest.",
        "",
        "| world | model | + earlier user and item offsets | + every effect but the hidden "
        "ones | + its mean per user | + the rest, within users |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for name, gains in r.get("headroom", {}).items():
            cells = [f"{gains[k]:+.4f}" if k in gains else "n/a" for k in HEADROOM]
            lines.append(f"| {r['world']['name']} | {name} | {' | '.join(cells)} |")
    return lines


def table(results: list[dict], host: dict) -> str:
    """The quality tables, one per question, from the worlds' results."""
    sections = [
        _model_table(results, host),
        _margin_table(results),
        _gauc_table(results),
        _served_table(results),
        snapshot_time.table(results)[:-1],
        _headroom_table(results),
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines)


def readme_table(result: dict) -> str:
    """The published block from the stored results file."""
    return table(result["worlds"], result["machine"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny world and 1 epoch: a smoke test")
    p.add_argument(
        "--worlds",
        default=",".join(w.name for w in WORLDS),
        help="comma-separated worlds to measure (default: all)",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="max epochs of dailyrec (default: configs/local.json's max_epochs)",
    )
    p.add_argument("--scratch", default=str(SCRATCH), help="where worlds and datasets are kept")
    p.add_argument(
        "--results", default=None, help="JSON output (default: benchmarks/results/quality.json)"
    )
    p.add_argument("--no-readme", action="store_true", help=NO_README_HELP)
    args = p.parse_args(argv)
    epochs = args.epochs or (1 if args.quick else json.loads(CONFIG.read_text())["max_epochs"])
    worlds = [QUICK] if args.quick else [w for w in WORLDS if w.name in args.worlds.split(",")]
    results = [measure_world(w, Path(args.scratch), epochs) for w in worlds]
    host = machine()
    result = {
        "benchmark": NAME,
        "machine": host,
        "epochs": epochs,
        "worlds": results,
        "targets": {"margin": MARGIN, "oracle_gap": ORACLE_GAP},
    }
    publish(
        NAME,
        result,
        table(results, host),
        results=args.results,
        throwaway=args.quick,
        readme=not args.no_readme,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
