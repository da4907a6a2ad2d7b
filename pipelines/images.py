"""The images the pipeline's components run in: defined once in :mod:`kube.types`, named here
for the component modules (``base_image=RUNTIME_IMAGE``)."""

from kube.types import RUNTIME_IMAGE, TRAINER_IMAGE

__all__ = ["RUNTIME_IMAGE", "TRAINER_IMAGE"]
