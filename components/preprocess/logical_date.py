"""The day a run trains on: ``run_date`` if given, else the day before the run's schedule time.

A recurring run's logical date is its schedule time (KFP's
``{{$.pipeline_job_schedule_time_utc}}``, RFC 3339 in UTC), not the moment it happens to start:
a run scheduled for 2026-01-15T02:00Z trains on the window ending 2026-01-14 (the last whole
UTC day before it) whether it starts on time, late, or is retried the next week, and a backfill
(a recurring run created with a past start time and catch-up on) trains each missed day on its
own window. A KFP backend (>= 2.17) gives a manual run its creation time as schedule time (the
same rule applies); 2.14-2.16 pass it empty or unresolved, and kfp.local has none: then the
window ends on the latest day present.
"""

from __future__ import annotations

import datetime as dt


def logical_end_date(run_date: str, schedule_time: str) -> dt.date | None:
    """The window's last day; None = the latest day present. ``run_date`` (YYYY-MM-DD) overrides."""
    if run_date:
        try:
            return dt.date.fromisoformat(run_date)
        except ValueError:
            raise ValueError(f"run_date {run_date!r}: expected YYYY-MM-DD") from None
    text = (schedule_time or "").strip()
    if not text or text.startswith(
        "{{"
    ):  # kfp.local, or a backend that does not resolve the placeholder
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"schedule time {schedule_time!r}: expected an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"schedule time {schedule_time!r}: has no time zone")
    return moment.astimezone(dt.UTC).date() - dt.timedelta(days=1)
