"""Register stage: MLflow registry, the pyfunc model, aliases."""
