"""The estimate stage: a resource plan (plan.json) from a dataset, a model config and hardware.

    python -m components.estimate --data DIR --model CONFIG --hardware PROFILE \
        [--global-batch B] [--deadline-hours H] [--probe] --out plan.json

The same in Python: ``estimate(EstimateConfig(...)) -> plan document``;
``estimate_and_write(config, path)`` writes it. See planner.py (choices), timemodel.py (the
time model), memory.py (the memory model), probe.py (measurements), hardware.py (profiles) and
table.py (the plan as a table).
"""

from components.estimate.config import EstimateConfig, EstimateError, InfeasibleError
from components.estimate.hardware import HardwareError, HardwareProfile, load_profile

_PLANNER = ("estimate", "estimate_and_write")


def __getattr__(name: str):
    # the planner imports torch: loaded when first used, not by `--help`
    if name in _PLANNER:
        from components.estimate import planner

        return getattr(planner, name)
    if name == "plan_table":
        from components.estimate.table import plan_table

        return plan_table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EstimateConfig",
    "EstimateError",
    "HardwareError",
    "HardwareProfile",
    "InfeasibleError",
    "estimate",
    "estimate_and_write",
    "load_profile",
    "plan_table",
]
