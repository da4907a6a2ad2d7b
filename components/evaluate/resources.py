"""How big the evaluate task's pod must be for a dataset: sized from its test split, as the
TrainJob is sized from the plan and the Dask workers from the input.

Evaluate reads the test split's arrays (memmaps, paged in as the candidate and the champion score
them), keeps both models' scores and the labels and user keys for AUC, GAUC, DeLong and the
user-block bootstrap, and runs the scoring on as many CPU threads as the pod has. A production
test day (10 M rows) needs more than a fixed 2-CPU, 12 GiB pod.
"""

from __future__ import annotations

import math

BASE_BYTES = 2 * 2**30
"""Interpreter, torch, both models, MLflow client and plotting, before any row."""
PER_ROW_BYTES = 96
"""Beyond the arrays themselves: two models' float64 scores, sort and rank buffers of the AUCs,
the bootstrap's user index."""
HEADROOM = 1.5
MIN_MEMORY_GIB, MIN_CPU, MAX_CPU = 8, 2, 16
ROWS_PER_CPU = 2_000_000
"""Test rows per scoring thread: below this, more threads mostly wait on each other."""


def evaluate_resources(test_rows: int, row_bytes: int) -> tuple[str, str]:
    """(CPU, memory) quantities for the evaluate task's pod (requests = limits) for a test split of
    ``test_rows`` rows of ``row_bytes`` each (every array: ``DatasetMeta.row_bytes``)."""
    need = HEADROOM * (BASE_BYTES + test_rows * (row_bytes + PER_ROW_BYTES))
    gib = max(MIN_MEMORY_GIB, math.ceil(need / 2**30))
    cpu = min(MAX_CPU, max(MIN_CPU, math.ceil(test_rows / ROWS_PER_CPU)))
    return str(cpu), f"{gib}Gi"
