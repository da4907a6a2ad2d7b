"""dailyrec: one sub-package per pipeline stage, plus `common` for what they share."""

__version__ = "0.1.0"
