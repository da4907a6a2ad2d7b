"""The one place that names the container images the pipeline's components run in.

Overridable at compile time (``DAILYREC_RUNTIME_IMAGE``, ``DAILYREC_TRAINER_IMAGE``),
e.g. by ``make compile REGISTRY=... TAG=...``; the local runner ignores images.
"""

from __future__ import annotations

import os

VERSION = "0.1.0"
RUNTIME_IMAGE = os.environ.get("DAILYREC_RUNTIME_IMAGE", f"ghcr.io/dailyrec/dailyrec-runtime:{VERSION}")
"""CPU image: preprocess, estimate, evaluate, register, the training launcher."""
TRAINER_IMAGE = os.environ.get("DAILYREC_TRAINER_IMAGE", f"ghcr.io/dailyrec/dailyrec-trainer:{VERSION}")
"""CUDA image the training processes run in (Kubeflow Trainer runtime)."""
