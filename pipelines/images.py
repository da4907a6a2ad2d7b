"""The images the pipeline's components run in (defined in :mod:`components.common.images`)."""

from components.common.images import RUNTIME_IMAGE, TRAINER_IMAGE

__all__ = ["RUNTIME_IMAGE", "TRAINER_IMAGE"]
