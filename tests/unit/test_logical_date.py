"""The window's last day: run_date, else the day before the schedule time, else the latest present."""

from __future__ import annotations

import datetime as dt

import pytest
from kfp import dsl

from components.preprocess.logical_date import logical_end_date


def test_a_scheduled_run_trains_on_the_day_before_its_schedule_time():
    assert logical_end_date("", "2026-01-15T02:00:00Z") == dt.date(2026, 1, 14)
    assert logical_end_date("", "2026-01-15T00:00:00+00:00") == dt.date(2026, 1, 14)
    # a time given in another zone counts in UTC: 01:30+02:00 is still 2026-01-14 in UTC
    assert logical_end_date("", "2026-01-15T01:30:00+02:00") == dt.date(2026, 1, 13)


def test_run_date_overrides_the_schedule_time():
    assert logical_end_date("2026-01-03", "2026-01-15T02:00:00Z") == dt.date(2026, 1, 3)
    with pytest.raises(ValueError, match="run_date '2026-13-01': expected YYYY-MM-DD"):
        logical_end_date("2026-13-01", "")


@pytest.mark.parametrize("unresolved", ["", "  ", dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER])
def test_no_schedule_time_means_the_latest_day_present(unresolved):
    assert logical_end_date("", unresolved) is None


def test_a_malformed_schedule_time_is_refused():
    with pytest.raises(ValueError, match="schedule time 'yesterday': expected an RFC 3339 time"):
        logical_end_date("", "yesterday")
    with pytest.raises(ValueError, match="schedule time '2026-01-15T02:00:00': has no time zone"):
        logical_end_date("", "2026-01-15T02:00:00")
