"""The evaluate stage: offline metrics (AUC, GAUC, log loss, calibration) and model comparison."""
