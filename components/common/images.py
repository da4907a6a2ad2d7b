"""The images dailyrec's tasks run in: the components name them (``base_image=RUNTIME_IMAGE``),
the cluster builders (``kube``) and ``make deploy`` map them onto the pushed references."""

import os

IMAGE_VERSION = "0.1.0"
RUNTIME_REPO = "ghcr.io/dailyrec/dailyrec-runtime"
TRAINER_REPO = "ghcr.io/dailyrec/dailyrec-trainer"
RUNTIME_IMAGE = os.environ.get("DAILYREC_RUNTIME_IMAGE", f"{RUNTIME_REPO}:{IMAGE_VERSION}")
"""CPU image: every KFP task, the training launcher and the Dask scheduler/workers. Set at compile
time by ``make deploy`` (``$DAILYREC_RUNTIME_IMAGE``); the local runner ignores images."""
TRAINER_IMAGE = os.environ.get("DAILYREC_TRAINER_IMAGE", f"{TRAINER_REPO}:{IMAGE_VERSION}")
"""CUDA image of the TrainJob pods (``$DAILYREC_TRAINER_IMAGE``)."""
IMAGE_REPOS = {"runtime": RUNTIME_REPO, "trainer": TRAINER_REPO}
"""The names the manifests use; ``make deploy`` maps them onto the pushed references (kustomize images)."""
