"""The registered model's entry point (MLflow "models from code": loading runs this, unpickles nothing)."""

import mlflow

from components.register.pyfunc import DailyrecModel

mlflow.models.set_model(DailyrecModel())
