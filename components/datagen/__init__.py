"""Synthetic e-commerce exposure/click logs with a known click-probability ceiling."""

from components.datagen.generator import DatagenConfig, generate, roc_auc

__all__ = ["DatagenConfig", "generate", "roc_auc"]
