"""The human-readable side of evaluation: ROC, calibration and by-day plots, a Markdown report
and the same report as a page with its plots inline (what MLflow's artifact view shows)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

from components.common.evaluation import Decision, Metrics
from components.evaluate.decision import comparison_defined, undefined_why

ROC_PNG, CALIBRATION_PNG, HISTORY_PNG = "roc.png", "calibration.png", "history.png"
REPORT_MD, REPORT_HTML = "report.md", "report.html"
PLOTS = {"ROC": ROC_PNG, "Calibration": CALIBRATION_PNG, "By day": HISTORY_PNG}
"""The report's plots: title -> file."""


def _figure(rows: int = 1, cols: int = 1, size=(4.5, 4.5), **kwargs):
    import matplotlib

    matplotlib.use("Agg")  # no display in pipelines and CI
    import matplotlib.pyplot as plt

    return plt, plt.subplots(rows, cols, figsize=size, dpi=100, **kwargs)


def _save(plt, fig, path: Path) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


ROC_ZOOM_FPR = 0.1
"""The right panel of the ROC plot: false positive rates up to this, where a feed's top slots are
decided."""


def _labelled(label: str, aucs: dict[str, float] | None) -> str:
    auc = (aucs or {}).get(label)
    return label if auc is None or auc != auc else f"{label} (AUC {auc:.4f})"


def plot_roc(
    curves: dict[str, list[dict]], path: Path, aucs: dict[str, float] | None = None
) -> bytes:
    """ROC curves ({label: points}, each labelled with its AUC from ``aucs``) with the chance
    diagonal, whole and zoomed on low false positive rates; returns the PNG bytes."""
    plt, (fig, axes) = _figure(1, 2, size=(9, 4.5))
    for ax, top in zip(axes, (1.0, ROC_ZOOM_FPR), strict=True):
        for label, points in curves.items():
            fpr = [p["fpr"] for p in points]
            tpr = [p["tpr"] for p in points]
            ax.plot(fpr, tpr, label=_labelled(label, aucs))
        ax.plot([0, top], [0, top], linestyle=":", color="grey", label="chance")
        ax.set(
            xlabel="false positive rate",
            ylabel="true positive rate",
            xlim=(0, top),
            ylim=(0, 1 if top == 1 else None),
        )
    axes[0].set_title("ROC (test split)")
    axes[1].set_title(f"low false positive rates (up to {ROC_ZOOM_FPR:g})")
    axes[1].set_ylim(bottom=0)
    axes[0].legend(loc="lower right")
    return _save(plt, fig, path)


def plot_calibration(
    curves: dict[str, list[dict]], path: Path, predictions: dict | None = None
) -> bytes:
    """Reliability diagram ({label: equal-mass bins}) on log axes (click rates span decades),
    with the histogram of each model's predicted probabilities (``predictions``: label -> array)
    below; returns the PNG bytes."""
    import numpy as np

    plt, (fig, (ax, hist)) = _figure(
        2, 1, size=(5, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    low, high = 1.0, 0.0
    for label, bins in curves.items():
        xs = [b["mean_prediction"] for b in bins]
        ys = [b["positive_rate"] for b in bins]
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
        if points:
            low = min(low, *(min(p) for p in points))
            high = max(high, *(max(p) for p in points))
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label)
    low, high = (low / 1.5, min(1.0, high * 1.5)) if high > 0 else (1e-3, 1.0)
    ax.plot([low, high], [low, high], linestyle=":", color="grey", label="perfect")
    ax.set(
        xscale="log",
        yscale="log",
        ylabel="observed click rate",
        title="Calibration (equal-mass bins)",
        xlim=(low, high),
        ylim=(low, high),
    )
    ax.legend(loc="upper left")
    edges = np.geomspace(low, high, 40)
    for label, values in (predictions or {}).items():
        values = np.asarray(values, dtype=float)
        hist.hist(np.clip(values, low, high), bins=edges, histtype="step", label=label)
    hist.set(xscale="log", xlabel="predicted probability", ylabel="rows")
    return _save(plt, fig, path)


PLAN_BAND = 0.1
"""The shaded band of the plan-vs-actual panel: the plan's measured accuracy (docs/performance.md)."""


def plot_history(days: list[dict], path: Path) -> bytes:
    """By test day (``days``: oldest first, each ``{"day", "test_auc", "champion_auc",
    "blessed", "time_ratio", "memory_ratio"}``, None where unknown): the candidate's test AUC
    against the champion's on the same rows (blessed days ringed), and the training's measured
    time and peak memory over what its plan predicted; returns the PNG bytes."""
    import datetime as dt

    plt, (fig, (auc, plan)) = _figure(1, 2, size=(10, 4))
    x = [dt.date.fromisoformat(d["day"]) for d in days]

    def series(key: str) -> list[float]:
        return [float("nan") if d.get(key) is None else float(d[key]) for d in days]

    auc.plot(x, series("test_auc"), marker="o", label="candidate")
    auc.plot(x, series("champion_auc"), marker="s", linestyle="--", label="champion")
    ringed = [(x[i], d["test_auc"]) for i, d in enumerate(days) if d.get("blessed")]
    if ringed:
        auc.scatter(*zip(*ringed, strict=True), s=140, facecolors="none", edgecolors="green")
        auc.plot([], [], "o", mfc="none", mec="green", label="blessed")
    auc.set(title="test AUC by day", ylabel="AUC")
    auc.legend(loc="best")
    for key, label in (("time_ratio", "training time"), ("memory_ratio", "peak memory")):
        plan.plot(x, series(key), marker="o", label=label)
    plan.axhline(1.0, linestyle=":", color="grey")
    plan.axhspan(1 - PLAN_BAND, 1 + PLAN_BAND, color="grey", alpha=0.15, label=f"±{PLAN_BAND:.0%}")
    plan.set(title="training: measured / planned", ylabel="ratio")
    plan.legend(loc="best")
    import matplotlib.dates as mdates

    for ax in (auc, plan):  # days, not a calendar: a lone day keeps a day either side
        if x:
            ax.set_xlim(min(x) - dt.timedelta(days=1), max(x) + dt.timedelta(days=1))
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=2, maxticks=8))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    fig.autofmt_xdate()
    return _save(plt, fig, path)


def _row(name: str, key: str, candidate: dict, champion: dict | None, fmt: str = ".4f") -> str:
    def cell(value):
        return "—" if value is None else format(value, fmt)

    return (
        f"| {name} | {cell(candidate.get(key))} | {cell(champion.get(key) if champion else None)} |"
    )


def served_lines(served: dict | None, champion: dict) -> list[str]:
    """The test day as serving scores it, and the train-serve skew."""
    if not served:
        return []
    skew, alone = served["skew"], served["snapshot_only_auc"]
    lines = [
        f"As served (the state at the test day's start, each user's earlier events of the day "
        f"sent along): candidate AUC {served['auc']:.4f}"
        + (
            f", champion AUC {champion['served_auc']:.4f}"
            if champion.get("served_auc") is not None
            else ""
        )
        + f"; the gate compares the models as served. From the snapshot alone (a caller "
        f"sending no events) the candidate reaches {alone['auc']:.4f}.",
        "",
    ]
    if skew["se"] == skew["se"]:
        lines += [
            f"Train-serve skew (the candidate's AUC on the dataset's features − as served): "
            f"{skew['delta']:+.4f}, {100 * skew['confidence']:.0f}% CI "
            f"[{skew['ci_low']:+.4f}, {skew['ci_high']:+.4f}] with the {skew['users']} users "
            "as the unit.",
            "",
        ]
    return lines


def _interval_lines(interval: dict | None) -> list[str]:
    """The candidate's test AUC with its interval over users (nothing when it is undefined)."""
    if not interval or interval.get("se") != interval.get("se"):  # NaN: too few users or labels
        return []
    return [
        f"Candidate's test AUC {interval['auc']:.4f}, "
        f"{100 * interval['confidence']:.0f}% CI [{interval['ci_low']:.4f}, "
        f"{interval['ci_high']:.4f}] with the {interval['users']} users as the unit.",
        "",
    ]


def _comparison_lines(comparison: dict | None, decision: Decision) -> list[str]:
    """The AUC delta against the champion: the interval the gate reads, the rows-as-independent
    one for scale, and the loss this test day can detect."""
    if not comparison:
        return []
    if not comparison_defined(comparison):
        return [
            f"AUC delta (candidate − champion): undefined: {undefined_why(comparison)}; "
            "see the decision above.",
            "",
        ]
    level = f"{100 * comparison['confidence']:.0f}%"
    iid = comparison.get("iid") or {}
    lines = [
        f"AUC delta (candidate − champion): {comparison['delta']:+.4f}, {level} CI "
        f"[{comparison['ci_low']:+.4f}, {comparison['ci_high']:+.4f}] with the "
        f"{comparison.get('users')} users as the unit (p = {comparison['p_value']:.3g}); "
        "the gate reads this interval.",
        "",
    ]
    if iid.get("se"):
        lines += [
            f"Rows taken as independent (DeLong), the same delta would read {level} CI "
            f"[{iid['ci_low']:+.4f}, {iid['ci_high']:+.4f}]: "
            f"{comparison['se'] / iid['se']:.1f}x narrower than the users allow.",
            "",
        ]
    if decision.detectable_effect is not None:
        lines += [
            f"Detectable effect: this test day refuses a true loss of "
            f"{decision.detectable_effect:.4f} AUC with 80% power; a smaller loss may "
            'pass as "not significantly worse".',
            "",
        ]
    return lines


def _plan_lines(pva: dict | None) -> list[str]:
    """Training's plan against what it measured (seconds, throughput, peak memory), drift flagged."""
    if not pva:
        return []
    from components.common.plan import drift_lines

    lines = [
        "## Training: plan vs reality",
        "",
        "| measure | planned | measured | ratio |",
        "|---|---:|---:|---:|",
    ]
    for key, unit, scale in (
        ("seconds", "s", 1),
        ("samples_per_s", "/s", 1),
        ("peak_memory_bytes", "GiB", 2**30),
    ):
        c = pva.get(key)
        if c:
            flag = " **DRIFT**" if c["drift"] else ""
            lines.append(
                f"| {key.replace('_', ' ')} | {c['predicted'] / scale:,.2f} {unit} | "
                f"{c['measured'] / scale:,.2f} {unit} | x{c['ratio']:.2f}{flag} |"
            )
    return [*lines, "", *drift_lines(pva)[: 1 if pva["drift"] else 0], ""]


def markdown(metrics: Metrics, decision: Decision, images: dict[str, str]) -> str:
    """The report: verdict, reasons, metric table, plots (``images``: title -> link or data URI)."""
    champion = metrics.champion
    scored = champion.get("metrics")
    candidate = metrics.candidate
    verdict = "**BLESSED**" if decision.blessed else "**NOT BLESSED**"
    version = f" v{champion['version']}" if champion.get("version") else ""
    lines = [
        f"# Evaluation of `{metrics.model_name}` candidate: {verdict}",
        "",
        *[f"- {reason}" for reason in decision.reasons],
        "",
        f"Test split: {candidate['rows']:,} rows, {candidate['users']:,} users, "
        f"window {(metrics.dataset.get('window') or {}).get('test_days', '?')}.",
        "",
        f"| metric | candidate | champion{version} |",
        "|---|---|---|",
        _row("AUC", "auc", candidate, scored),
        _row("GAUC", "gauc", candidate, scored),
        _row("logloss", "logloss", candidate, scored),
        _row("ECE", "ece", candidate, scored),
        _row("mean prediction", "mean_prediction", candidate, scored),
        _row("click rate", "positive_rate", candidate, scored),
        "",
    ]
    lines += _interval_lines(metrics.test_auc_interval)
    lines += served_lines(metrics.served, champion)
    lines += _comparison_lines(metrics.comparison, decision)
    lines += _plan_lines(metrics.plan_vs_actual)
    lines += guard_lines(metrics.guards)
    lines += [f"![{title}]({src})" for title, src in images.items()]
    return "\n".join(lines) + "\n"


def guard_lines(guards: dict | None) -> list[str]:
    """The data guards' table: each new day's values against the reference window."""
    if not guards:
        return []
    rule = guards["rule"]
    lines = [
        "## Data guards",
        "",
        "The test day (marked *test*) and each day the reference window "
        f"({guards['reference']['days']}, {guards['reference']['rows']:,} rows) never saw, "
        "against it; "
        + ("**blocked**." if guards["blocked"] else "no block.")
        + (" (report only)" if rule.get("report_only") else ""),
        "",
        "| day | rows | volume | click rate | new users | new items | replayed | largest user "
        "| largest feature shift | item ids JS | category ids JS |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(value, fmt):
        return "—" if value is None else format(value, fmt)

    tests = set(guards.get("test_days", ()))
    for day in guards["days"]:
        v = day["values"]
        name = f"{day['day']} *test*" if day["day"] in tests else day["day"]
        shifts = {k[6:]: x for k, x in v.items() if k.startswith("shift:") and x is not None}
        worst = max(shifts, key=shifts.get) if shifts else None
        lines.append(
            f"| {name} | {day['rows']:,} | {f(v.get('volume'), '.2f')}x | "
            f"{f(v.get('click_rate'), '.2f')}x | {f(v.get('new_users'), '+.3f')} | "
            f"{f(v.get('new_items'), '+.3f')} | {f(v.get('replayed'), '.1%')} | "
            f"{f(v.get('user_share'), '+.1%')} | "
            + (f"{worst} {shifts[worst]:.2f} sd" if worst else "—")
            + f" | {f(v.get('js:item'), '.3f')} | {f(v.get('js:category'), '.3f')} |"
        )
    lines += [
        "",
        f"Thresholds: volume {rule['min_volume_ratio']:g}..{rule['max_volume_ratio']:g}x, click "
        f"rate {rule['min_click_rate_ratio']:g}..{rule['max_click_rate_ratio']:g}x, new users or "
        f"items +{rule['max_new_share_increase']:g}, replayed {rule['max_replayed_share']:.0%}, "
        f"feature shift {rule['max_feature_shift']:g} sd, id JS {rule['max_id_js']:g}, "
        f"largest user +{rule.get('max_user_share_increase', 0):.0%}.",
        "",
        *[f"- {line}" for line in guards["findings"]],
        "",
    ]
    return lines


def html(markdown_text: str, title: str) -> str:
    """The report as a page: the subset of Markdown :func:`markdown` writes (headings, bullets,
    tables, images, bold and code spans), every text escaped; images keep their sources (pass
    data URIs to have them inline)."""
    import html as escape
    import re

    def inline(text: str) -> str:
        text = escape.escape(text, quote=False)
        text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)

    def cells(row: str, tag: str) -> str:
        return "".join(f"<{tag}>{inline(c.strip())}</{tag}>" for c in row.strip("|").split("|"))

    body, lines, i = [], markdown_text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        block = [line]
        if line.startswith(("- ", "|")):  # a list or a table: its consecutive lines
            while i + 1 < len(lines) and lines[i + 1].startswith(line[0]):
                i += 1
                block.append(lines[i])
        i += 1
        if heading := re.match(r"(#{1,3}) (.*)", line):
            level = len(heading.group(1))
            body.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
        elif image := re.fullmatch(r"!\[(.*?)\]\((.*?)\)", line):
            alt, src = escape.escape(image.group(1)), escape.escape(image.group(2))
            body.append(
                f'<figure><img alt="{alt}" src="{src}"><figcaption>{alt}</figcaption></figure>'
            )
        elif line.startswith("- "):
            body.append("<ul>" + "".join(f"<li>{inline(b[2:])}</li>" for b in block) + "</ul>")
        elif line.startswith("|"):
            rows = [f"<tr>{cells(block[0], 'th')}</tr>"] + [
                f"<tr>{cells(b, 'td')}</tr>" for b in block[2:]
            ]
            body.append("<table>" + "".join(rows) + "</table>")
        elif line.strip():
            body.append(f"<p>{inline(line)}</p>")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:72em;line-height:1.45}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;"
    "text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:100%}"
    "figure{margin:1em 0}code{background:#f3f3f3;padding:0 .2em}"
)


def data_uri(png: bytes) -> str:
    """A PNG inlined, for viewers that cannot follow relative links (the Kubeflow UI)."""
    return "data:image/png;base64," + base64.b64encode(png).decode()
