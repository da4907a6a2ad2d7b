"""What the generator makes: :class:`DatagenConfig`, checked where it is built."""

from __future__ import annotations

import dataclasses
import datetime as dt
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ID_FORMATS = ("int", "str")
"""int: int64 ids; str: strings like u17, i42, c3."""


@dataclass(frozen=True)
class DatagenConfig:
    """What to generate."""

    out: Path
    """Output folder (str or Path): replaced atomically; refused if it is a non-empty folder
    without a _datagen.json."""
    days: int = 14
    """Number of consecutive UTC days, starting at `start_date`."""
    users: int = 20_000
    """Distinct users (ids 1..users)."""
    items: int = 50_000
    """Distinct items (ids 1..items)."""
    events_per_day: int = 200_000
    """Exposure rows per day (exact)."""
    seed: int = 7
    """Seed of the single random generator: same config => same bytes."""
    categories: int = 500
    """Item categories (ids 1..categories), <= items."""
    start_date: dt.date = dt.date(2026, 1, 1)
    """The first day, YYYY-MM-DD."""
    click_rate: float = 0.08
    """Target share of clicked exposures (mean label), strictly between 0 and 1."""
    id_format: str = dataclasses.field(default="int", metadata={"choices": ID_FORMATS})
    """int: int64 ids; str: strings like u17, i42, c3."""
    rows_per_file: int = 1_000_000
    """Most rows in one part file of a day."""

    def __post_init__(self) -> None:
        if not isinstance(self.out, str | os.PathLike) or not str(self.out):
            raise ValueError(f"out must be a non-empty path, got {self.out!r}")
        object.__setattr__(self, "out", Path(self.out))
        for name in ("days", "users", "items", "events_per_day", "categories", "rows_per_file"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.categories > self.items:
            raise ValueError(
                f"categories ({self.categories}) must not exceed items ({self.items}): "
                "every category needs at least one item"
            )
        start = self.start_date
        if isinstance(start, str):
            try:
                start = dt.date.fromisoformat(start)
            except ValueError:
                raise ValueError(
                    f"start_date must be a date YYYY-MM-DD, got {self.start_date!r}"
                ) from None
        if not isinstance(start, dt.date) or isinstance(start, dt.datetime):
            raise ValueError(f"start_date must be a date YYYY-MM-DD, got {self.start_date!r}")
        object.__setattr__(self, "start_date", start)
        try:
            start + dt.timedelta(days=self.days)
        except OverflowError:
            raise ValueError(
                f"days ({self.days}) from start_date {start} runs past year 9999"
            ) from None
        rate = self.click_rate
        if not isinstance(rate, numbers.Real) or isinstance(rate, bool) or not 0.0 < rate < 1.0:
            raise ValueError(f"click_rate must be a number strictly between 0 and 1, got {rate!r}")
        object.__setattr__(self, "click_rate", float(rate))
        if self.id_format not in ID_FORMATS:
            raise ValueError(
                f"id_format must be one of {', '.join(ID_FORMATS)}, got {self.id_format!r}"
            )

    @property
    def dates(self) -> list[dt.date]:
        return [self.start_date + dt.timedelta(days=d) for d in range(self.days)]

    def parameters(self) -> dict[str, Any]:
        """The config as JSON values, without ``out`` (a dataset is relocatable)."""
        params = dataclasses.asdict(self)
        del params["out"]
        params["start_date"] = self.start_date.isoformat()
        return params


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
