"""Per-day books of the preprocess stage: limits on quarantined and duplicate rows.

A limit checked only over the whole window lets one bad day through (a day
written in epoch milliseconds is all quarantined, yet under 10% of a 14-day
window), so each limit holds for every day as well as overall.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict

from components.common import schema
from components.preprocess.clean import REASONS
from components.preprocess.errors import InputError


def day_of(day_number: int) -> str:
    """ISO date of a day number (days since 1970-01-01)."""
    return (dt.date(1970, 1, 1) + dt.timedelta(days=int(day_number))).isoformat()


def check_quarantine(counts: list[dict], limit: float) -> None:
    """Fail when more than ``limit`` of the rows read, overall or of any one day, were quarantined.

    ``counts``: what each validate task returned (``day``, ``read``, ``quarantined``,
    ``examples``, ``values``).
    """
    days: dict[str, list[dict]] = defaultdict(list)
    for c in counts:
        days[c["day"]].append(c)
    scopes = [*sorted(days.items()), (None, counts)]  # a day first: that names where to look
    for day, group in scopes:
        read = sum(c["read"] for c in group)
        quarantined = Counter()
        for c in group:
            quarantined.update(c["quarantined"])
        bad = sum(quarantined.values())
        if not read or bad / read <= limit:
            continue
        worst = max(quarantined, key=quarantined.get)
        example = next(c for c in group if worst in c["examples"])
        where = f"{schema.day_folder_name(dt.date.fromisoformat(day))!r}: " if day else ""
        scope = "rows of this day" if day else "rows"
        raise InputError(
            f"{where}{bad} of {read} {scope} ({bad / read:.1%}) failed validation, above "
            f"max_quarantine_fraction={limit}; most common: {worst} ({quarantined[worst]} rows, "
            f"column {REASONS[worst]!r}), e.g. {example['examples'][worst]}"
            f"{_milliseconds_hint(worst, example['values'].get(worst), example['day'])}"
        )


def _milliseconds_hint(reason: str, value: str | None, day: str) -> str:
    """A hint when out-of-range epoch numbers are the day's times in milliseconds or microseconds."""
    if reason != "timestamp_out_of_range" or value is None:
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    start = schema.day_start_epoch(dt.date.fromisoformat(day))
    for unit, scale in (("milliseconds", 1e3), ("microseconds", 1e6), ("nanoseconds", 1e9)):
        if start - 86_400 <= number / scale < start + 2 * 86_400:
            return f"; the values look like epoch {unit}: write epoch seconds or a timestamp type"
    return ""


def rows_by_day(counts: list[dict], duplicates: dict[str, int]) -> dict[str, dict[str, int]]:
    """``{ISO day: {read, quarantined, duplicates}}`` for every day read."""
    out: dict[str, dict[str, int]] = {}
    for c in counts:
        entry = out.setdefault(c["day"], {"read": 0, "quarantined": 0, "duplicates": 0})
        entry["read"] += c["read"]
        entry["quarantined"] += sum(c["quarantined"].values())
    for day, n in duplicates.items():
        out[day]["duplicates"] = n
    return dict(sorted(out.items()))


def check_duplicates(by_day: dict[str, dict[str, int]], files: list, limit: float) -> None:
    """Fail, naming the day and its files, when more than ``limit`` of a day's rows were exact
    duplicates: more than a retry or two, more like a file copied twice or a lossy time type."""
    for day, books in by_day.items():
        if books["read"] and books["duplicates"] / books["read"] > limit:
            names = [f.relpath for f in files if f.day.isoformat() == day]
            shown = ", ".join(map(repr, names[:3])) + (
                f" and {len(names) - 3} more" if len(names) > 3 else ""
            )
            raise InputError(
                f"{schema.day_folder_name(dt.date.fromisoformat(day))!r}: {books['duplicates']} of "
                f"{books['read']} rows ({books['duplicates'] / books['read']:.1%}) are exact duplicates "
                f"(same user, item, category, second and label), above max_duplicate_fraction={limit}; "
                f"files: {shown}; is a file there twice, or are times cut to whole days or minutes?"
            )
