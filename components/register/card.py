"""The model card of a registered version: why it is (or is not) the champion, in one place.

Built from the records the stages wrote (the dataset's meta, the evaluation's metrics and
decision, the checkpoint's plan, the registration), logged into the version's MLflow run as
``model_card/model_card.md`` (what a person reads in the MLflow UI) and the same as
``model_card/model_card.json``. Pure: no MLflow here, so a test can rebuild it from the records.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from components.common.dataset import SPLITS
from components.common.evaluation import Decision, Metrics

if TYPE_CHECKING:
    from components.common.dataset_meta import DatasetMeta

CARD_DIR = "model_card"
CARD_MD = f"{CARD_DIR}/model_card.md"
CARD_JSON = f"{CARD_DIR}/model_card.json"
CARD_VERSION = 1


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def build_card(
    *,
    name: str,
    version: int,
    aliases: list[str],
    meta: DatasetMeta | None,
    metrics: Metrics,
    decision: Decision,
    checkpoint: dict,
    lineage: dict[str, str],
    pipeline_run_id: str,
) -> dict[str, Any]:
    """The card as a JSON document (see :func:`markdown` for the page)."""
    splits = meta.splits if meta else {}
    comparison = decision.comparison or None
    guards = metrics.guards or {}
    return {
        "card_version": CARD_VERSION,
        "model": {"name": name, "version": version, "aliases_at_registration": sorted(aliases)},
        "data": {
            "window": dataclasses.asdict(meta.window) if meta and meta.window else None,
            "dataset_fingerprint": meta and meta.fingerprint,
            "raw_inputs": meta.inputs if meta else None,
            "rows": {s: splits[s].rows if s in splits else None for s in SPLITS},
            "click_rate": {s: info.positive_rate for s, info in splits.items()},
        },
        "test": {
            **{k[len("test_") :]: _number(v) for k, v in metrics.numbers().items()},
            "auc_interval": metrics.test_auc_interval,
            "served_auc": _number(metrics.served.get("auc")),
            "train_serve_skew": metrics.served.get("skew"),
        },
        "gate": {
            "blessed": decision.blessed,
            "reasons": list(decision.reasons),
            "rule": dict(decision.rule),
            "champion_compared": decision.champion_version,
            "comparison": comparison
            and {k: comparison.get(k) for k in ("delta", "ci_low", "ci_high", "users", "iid")},
            "detectable_effect": _number(decision.detectable_effect),
        },
        "guards": guards
        and {
            "reference": guards.get("reference"),
            "blocked": guards.get("blocked"),
            "findings": guards.get("findings"),
            "days": guards.get("days"),
        },
        "plan_vs_actual": metrics.plan_vs_actual,
        "plan": checkpoint.get("plan"),
        "lineage": {
            "dataset_fingerprint": meta and meta.fingerprint,
            "training_run_id": lineage.get("training_run_id") or None,
            "evaluation_run_id": lineage.get("evaluation_run_id") or None,
            "pipeline_run_id": pipeline_run_id or None,
            "model_version": f"models:/{name}/{version}",
            "aliases_at_registration": sorted(aliases),
        },
    }


def _f(value: Any, fmt: str = ".4f") -> str:
    return "—" if not isinstance(value, int | float) else format(value, fmt)


def _served(t: dict) -> list[str]:
    skew = t.get("train_serve_skew")
    if t.get("served_auc") is None or not skew:
        return []
    return [
        f"- as served (the snapshot plus the day's events so far): AUC {_f(t['served_auc'])}; "
        f"train-serve skew {skew['delta']:+.4f} (95% CI {skew['ci_low']:+.4f} .. "
        f"{skew['ci_high']:+.4f})"
    ]


def _guard_section(guards: dict) -> list[str]:
    """The data guards' reference window, verdict and findings (nothing when they did not run)."""
    if not guards:
        return []
    return [
        "",
        "## Data guards",
        "",
        f"- reference window {(guards.get('reference') or {}).get('days')}; "
        + ("blocked" if guards.get("blocked") else "no block"),
        *[f"- {f}" for f in guards.get("findings") or []],
    ]


def _plan_section(pva: dict) -> list[str]:
    """Training's plan against what it measured (nothing without a plan)."""
    if not pva:
        return []
    return ["", "## Plan vs what happened", ""] + [
        f"- {key.replace('_', ' ')}: planned {_f(c['predicted'], ',.1f')}, measured "
        f"{_f(c['measured'], ',.1f')} (x{_f(c.get('ratio'), '.2f')})"
        for key, c in pva.items()
        if isinstance(c, dict) and "predicted" in c
    ]


def _lineage_section(lin: dict) -> list[str]:
    """Dataset → training run → evaluation run → model version, and the pipeline run."""
    return [
        "",
        "## Lineage",
        "",
        f"- dataset `{lin['dataset_fingerprint']}` → training run `{lin['training_run_id']}` → "
        f"evaluation run `{lin['evaluation_run_id']}` → `{lin['model_version']}`"
        + (
            f" (aliases at registration: {', '.join(lin['aliases_at_registration'])})"
            if lin["aliases_at_registration"]
            else ""
        ),
        f"- pipeline run `{lin['pipeline_run_id']}`",
        "",
    ]


def markdown(card: dict) -> str:
    """The card as the page a person reads in the MLflow UI."""
    m, d, t, g = card["model"], card["data"], card["test"], card["gate"]
    window = d.get("window") or {}
    rows = d["rows"]
    interval = t.get("auc_interval") or {}
    lines = [
        f"# {m['name']} v{m['version']}: "
        + ("blessed" if g["blessed"] else "not blessed")
        + (f" — {', '.join(m['aliases_at_registration'])}" if m["aliases_at_registration"] else ""),
        "",
        "## Data",
        "",
        f"- window {window.get('start')} .. {window.get('end')} (train {window.get('train_days')}, "
        f"val {window.get('val_days')}, test {window.get('test_days')}; history from "
        f"{window.get('history_start')})",
        f"- rows: train {_f(rows.get('train'), ',')}, val {_f(rows.get('val'), ',')}, "
        f"test {_f(rows.get('test'), ',')}",
        f"- dataset fingerprint `{d.get('dataset_fingerprint')}`",
        "",
        "## Test metrics",
        "",
        f"- AUC {_f(t['auc'])}"
        + (
            f" (95% CI {_f(interval.get('ci_low'))} .. {_f(interval.get('ci_high'))}, "
            f"{interval.get('users')} users as the unit)"
            if interval
            else ""
        ),
        f"- GAUC {_f(t['gauc'])}, logloss {_f(t['logloss'])}, ECE {_f(t['ece'])}",
        *_served(t),
        "",
        "## The gate",
        "",
        *[f"- {r}" for r in g["reasons"]],
    ]
    if g.get("detectable_effect") is not None:
        lines.append(f"- detectable effect: {_f(g['detectable_effect'])} AUC at 80% power")
    lines += _guard_section(card.get("guards") or {})
    lines += _plan_section(card.get("plan_vs_actual") or {})
    lines += _lineage_section(card["lineage"])
    return "\n".join(lines)
