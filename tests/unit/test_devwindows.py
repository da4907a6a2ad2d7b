"""Model development windows end before the quality benchmark's MovieLens test weeks."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from benchmarks.devwindows import WORLD, dev_window, main, variant


def test_a_dev_window_ends_shift_days_earlier_and_never_reaches_the_test_weeks():
    window = dev_window("1998-04-22", 28)
    end = dt.date.fromisoformat(window["end_date"])
    assert end == dt.date(1998, 3, 25)
    assert window["days"] == WORLD.window_days - 28  # the same first day
    assert (window["val_days"], window["test_days"]) == (WORLD.val_days, WORLD.test_days)
    benchmark_test_start = dt.date(1998, 4, 22) - dt.timedelta(days=WORLD.test_days - 1)
    assert end < benchmark_test_start
    with pytest.raises(ValueError, match="--shift must leave training days"):
        dev_window("1998-04-22", WORLD.window_days - WORLD.val_days - WORLD.test_days)
    with pytest.raises(ValueError, match="--shift"):
        dev_window("1998-04-22", 0)


def test_variants_are_named_plan_overrides():
    assert variant('l2={"embedding_l2": 2.0}') == ("l2", {"embedding_l2": 2.0})
    assert variant("base={}") == ("base", {})
    for bad in ("base", "={}", "x=[1]", "x={nope"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected NAME="):
            variant(bad)


def test_an_unknown_plan_field_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(['x={"embeding_l2": 2}', "--scratch", str(tmp_path)])
    assert exit_.value.code == 2
    assert "variant x: embeding_l2 not a plan field" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
