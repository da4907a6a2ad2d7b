"""What a snapshot's time resolution costs and what it protects, on one trained model and window.

A registered version carries a snapshot of its users (``components.score.features.UserState``):
their last clicks and skips with times, and each user's last exposure and click. Exact times
single users out: someone who knows two click times of a person (seen over a shoulder, their
own account) finds that person's pseudonymous key and every other event the snapshot holds of
them; whoever holds the raw log links a key to a raw id by its last exposure time alone. For
each resolution in ``RESOLUTIONS`` this measures

* **served AUC**: the test split as evaluate serves it, the snapshot's times at that
  resolution, and its difference from exact times (users as the unit); its log loss and mean
  prediction (calibration) beside the click rate;
* **two clicks single out**: of users with two or more clicks in the snapshot, the share whom
  two of their click times (drawn at random) leave alone among the snapshot's users;
* **last exposure links**: the share of users whose last exposure time, at that resolution, no
  other user shares.

``make bench-quality`` runs it on each world's dailyrec model; the shipped resolution is
``SNAPSHOT_SECONDS``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

RESOLUTIONS = (1, 60, 600, 3600, 21_600, 86_400)
"""Seconds: exact, a minute, ten minutes, an hour, six hours, a day."""
SAMPLED_USERS = 2000
"""Users whose two clicks are tried (a deterministic draw)."""
MATCH_KEYS = ("user_key", "ts", "target_item", "target_cat", "label")


def two_clicks_single_out(events: dict[str, np.ndarray], seed: int = 0) -> float | None:
    """Of users with two or more clicks among ``events`` (a snapshot's), the share left alone
    by two of their click times: no other user has clicks at both times."""
    click = events["label"] == 1
    user, ts = events["user_key"][click], events["ts"][click]
    pairs = np.unique(np.stack([ts, user], axis=1), axis=0)  # (time, user), sorted by time
    times, owners = pairs[:, 0], pairs[:, 1]
    ids, counts = np.unique(owners, return_counts=True)
    eligible = ids[counts >= 2]
    if not len(eligible):
        return None
    rng = np.random.default_rng(seed)
    picked = rng.choice(eligible, size=min(SAMPLED_USERS, len(eligible)), replace=False)
    alone = 0
    for target in picked:
        mine = times[owners == target]
        t1, t2 = rng.choice(mine, size=2, replace=False)
        at = [
            owners[np.searchsorted(times, t, "left") : np.searchsorted(times, t, "right")]
            for t in (t1, t2)
        ]
        alone += len(np.intersect1d(at[0], at[1])) == 1
    return alone / len(picked)


def last_exposure_links(last: np.ndarray) -> float:
    """The share of users whose last exposure time no other user shares."""
    _, inverse, counts = np.unique(last, return_inverse=True, return_counts=True)
    return float(np.mean(counts[inverse] == 1)) if len(last) else 0.0


def by_resolution(data: Path, checkpoint: Path) -> list[dict]:
    """Per resolution: served AUC, its difference from exact times, and the two re-identification
    shares of the snapshot a version registered on ``data`` would carry."""
    from components.common.dataset_meta import DatasetMeta
    from components.evaluate.config import EvaluateConfig
    from components.evaluate.metrics import clustered_auc, clustered_delong, logloss
    from components.evaluate.stage import served_scores
    from components.score.features import Layout, UserState, read_user_events, user_event_parts
    from components.train.inference import load_scorer, split_rows

    meta = DatasetMeta.read(data)
    candidate = load_scorer(checkpoint)
    layout = Layout.of(candidate.vocab, check_key=False)
    rows = next(iter(split_rows(data, "test", meta, 1 << 40, MATCH_KEYS)))
    labels, users = rows["label"], rows["user_key"]
    events = read_user_events(user_event_parts(data))
    out, exact = [], None
    with tempfile.TemporaryDirectory(prefix="dailyrec-snapshot-time-") as tmp:
        config = EvaluateConfig(data=str(data), checkpoint=str(checkpoint), out=tmp)
        for resolution in RESOLUTIONS:
            prob = served_scores(config, meta, rows, candidate, None, resolution)["candidate"]
            exact = prob if exact is None else exact
            gap = clustered_delong(prob, exact, labels, users)
            state = UserState.of_events(events, layout, resolution)
            print(f"snapshot at {resolution} s: served AUC measured", flush=True)
            out.append(
                {
                    "seconds": resolution,
                    "served_auc": clustered_auc(prob, labels, users)["auc"],
                    "logloss": logloss(prob, labels),
                    "mean_prediction": float(np.mean(prob)),
                    "click_rate": float(np.mean(labels)),
                    "vs_exact": {k: gap[k] for k in ("delta", "ci_low", "ci_high")},
                    "two_clicks_single_out": two_clicks_single_out(state.events),
                    "last_exposure_links": last_exposure_links(state.totals["user"]["exposure"]),
                    "users": int(len(state.totals["user"]["key"])),
                }
            )
    return out


def table(results: list[dict]) -> list[str]:
    """Per world and resolution: served AUC against exact times, and what the snapshot reveals."""
    from components.score.features import SNAPSHOT_SECONDS

    rows = [r for r in results if r["models"]["dailyrec"].get("snapshot_time")]
    if not rows:
        return []
    lines = [
        f"A version's snapshot keeps its users' times at {SNAPSHOT_SECONDS:,} s "
        "(`SNAPSHOT_SECONDS`). What coarser times cost in served AUC (against exact times, 95% "
        "CI, users as the unit) and what they reveal: the share of users two of their click "
        "times single out, and the share a raw log links by last exposure time alone "
        "(benchmarks/snapshot_time.py).",
        "",
        "| world | resolution | served AUC | vs exact times | log loss | mean prediction "
        "(click rate) | two clicks single out | last exposure links |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for s in r["models"]["dailyrec"]["snapshot_time"]:
            v = s["vs_exact"]
            shipped = " (shipped)" if s["seconds"] == SNAPSHOT_SECONDS else ""
            single = s["two_clicks_single_out"]
            lines.append(
                f"| {r['world']['name']} | {s['seconds']:,} s{shipped} | {s['served_auc']:.4f} | "
                f"{v['delta']:+.4f} ({v['ci_low']:+.4f} .. {v['ci_high']:+.4f}) | "
                f"{s['logloss']:.4f} | {s['mean_prediction']:.4f} ({s['click_rate']:.4f}) | "
                + ("—" if single is None else f"{single:.1%}")
                + f" | {s['last_exposure_links']:.1%} |"
            )
    return [*lines, ""]
