"""Synthetic e-commerce exposure/click logs with a known click-probability ceiling."""

from components.datagen.generator import DatagenConfig, generate

__all__ = ["DatagenConfig", "generate"]
