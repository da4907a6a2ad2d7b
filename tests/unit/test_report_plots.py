"""The evaluation's plots read at a glance: each ROC curve labelled with its AUC, a zoom on the low
false positive rates a feed's top slots live in; calibration on log axes over a histogram."""

from __future__ import annotations

import numpy as np
import pytest

from components.evaluate import report
from components.evaluate.metrics import calibration, roc_points


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots draw, kept open for the test to read."""
    drawn = []
    save = report._save

    def keep(plt, fig, path):
        drawn.append(fig)
        fig.canvas.draw()
        out = save(plt, fig, path)
        return out

    monkeypatch.setattr(report, "_save", keep)
    return drawn


def _scores(seed: int, n: int = 4000):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.08).astype(int)
    p = 1 / (1 + np.exp(-(-2.6 + 1.2 * y + rng.normal(0, 1, n))))
    return p, y


def test_roc_names_each_curves_auc_and_zooms_on_low_false_positive_rates(tmp_path, figures):
    (p, y), (q, _) = _scores(1), _scores(2)
    curves = {"candidate": roc_points(p, y), "champion v3": roc_points(q, y)}
    png = report.plot_roc(curves, tmp_path / "roc.png", {"candidate": 0.7461, "champion v3": 0.7})
    assert png[:4] == b"\x89PNG" and (tmp_path / "roc.png").read_bytes() == png
    (fig,) = figures
    whole, zoom = fig.axes
    labels = [t.get_text() for t in whole.get_legend().get_texts()]
    assert labels == ["candidate (AUC 0.7461)", "champion v3 (AUC 0.7000)", "chance"]
    assert whole.get_xlim() == (0, 1) and zoom.get_xlim() == (0, report.ROC_ZOOM_FPR)


def test_calibration_is_drawn_on_log_axes_over_the_predictions_histogram(tmp_path, figures):
    p, y = _scores(3)
    bins = {"candidate": calibration(p, y, 20)["bins"]}
    report.plot_calibration(bins, tmp_path / "cal.png", {"candidate": p})
    (fig,) = figures
    reliability, histogram = fig.axes
    assert reliability.get_xscale() == reliability.get_yscale() == "log"
    assert histogram.get_xscale() == "log"
    counts = sum(patch.get_path().vertices[:, 1].max() for patch in histogram.patches)
    assert counts > 0  # the predictions are drawn
    low, high = reliability.get_xlim()
    means = [b["mean_prediction"] for b in bins["candidate"]]
    assert low <= min(means) and max(means) <= high


def test_history_draws_candidate_and_champion_by_day_and_the_plans_error(tmp_path, figures):
    days = [
        {
            "day": "2026-01-05",
            "test_auc": 0.71,
            "champion_auc": None,
            "blessed": True,
            "time_ratio": 1.04,
            "memory_ratio": 0.97,
        },
        {
            "day": "2026-01-06",
            "test_auc": 0.72,
            "champion_auc": 0.71,
            "blessed": False,
            "time_ratio": None,
            "memory_ratio": 0.95,
        },
        {
            "day": "2026-01-07",
            "test_auc": 0.73,
            "champion_auc": 0.71,
            "blessed": True,
            "time_ratio": 1.12,
            "memory_ratio": 0.96,
        },
    ]
    report.plot_history(days, tmp_path / "history.png")
    (fig,) = figures
    auc, plan = fig.axes
    candidate, champion = auc.get_lines()[:2]
    assert list(candidate.get_ydata()) == [0.71, 0.72, 0.73]
    assert np.isnan(champion.get_ydata()[0]) and list(champion.get_ydata()[1:]) == [0.71, 0.71]
    (ringed,) = auc.collections  # the blessed days
    assert [tuple(p) for p in ringed.get_offsets()][1][1] == 0.73 and len(ringed.get_offsets()) == 2
    legend = [t.get_text() for t in plan.get_legend().get_texts()]
    assert legend[:2] == ["training time", "peak memory"]
    time_line = plan.get_lines()[0]
    assert np.isnan(time_line.get_ydata()[1]) and time_line.get_ydata()[2] == 1.12


def test_the_page_shows_the_reports_text_tables_and_inline_plots():
    text = "\n".join(
        [
            "# Evaluation of `dailyrec` candidate: **BLESSED**",
            "",
            "- reason <one> & two",
            "- reason three",
            "",
            "| metric | candidate |",
            "|---|---|",
            "| AUC | 0.7100 |",
            "",
            "A paragraph.",
            "![ROC](data:image/png;base64,AAAA)",
        ]
    )
    page = report.html(text, "dailyrec")
    assert "<h1>Evaluation of <code>dailyrec</code> candidate: <b>BLESSED</b></h1>" in page
    assert "<ul><li>reason &lt;one&gt; &amp; two</li><li>reason three</li></ul>" in page
    assert (
        "<table><tr><th>metric</th><th>candidate</th></tr><tr><td>AUC</td><td>0.7100</td></tr></table>"
        in page
    )
    assert (
        '<img alt="ROC" src="data:image/png;base64,AAAA">' in page and "<p>A paragraph.</p>" in page
    )
    assert "|" not in page.split("<body>")[1] and "![" not in page
