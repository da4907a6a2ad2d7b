"""``python -m tests.reliability.report RESULTS.json``: the Reliability table (docs/reliability.md) from a test run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.readme import update_block


def table(rows: list[dict]) -> str:
    lines = ["| category | fault or bad input | observed outcome | test |", "|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["category"], r["fault"])):
        cells = [row["category"], row["fault"], row["outcome"], row["result"] or "not run"]
        lines.append(
            "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
        )
    passed = sum(r["result"] == "passed" for r in rows)
    skipped = sum(r["result"] == "skipped" for r in rows)
    return (
        "\n".join(lines)
        + f"\n\n{passed} of {len(rows)} checks passed"
        + (f" ({skipped} skipped)" if skipped else "")
        + " in the last `make test-reliability`.\n"
    )


def main(argv: list[str] | None = None) -> int:
    path = Path((argv or sys.argv[1:])[0])
    rows = json.loads(path.read_text())["rows"]
    home = update_block("reliability", table(rows))
    print(f"Reliability table: {len(rows)} rows from {path}" + (f" -> {home}" if home else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
