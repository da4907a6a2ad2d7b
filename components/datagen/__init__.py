"""Synthetic e-commerce exposure/click logs with a known click-probability ceiling."""

from components.datagen.config import DatagenConfig
from components.datagen.generator import generate

__all__ = ["DatagenConfig", "generate"]
