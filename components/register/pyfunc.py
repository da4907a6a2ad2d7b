"""The registered model: an MLflow pyfunc that scores feature arrays with a dailyrec checkpoint.

``mlflow.pyfunc.load_model("models:/NAME@champion").predict(arrays)`` takes a
dict of numpy arrays named as the Dataset contract's model inputs
(``hist_item``, ``hist_cat``, ``hist_gap``, ``hist_len``, ``target_item``,
``target_cat``, ``user``, ``context``: exactly what the preprocess stage
writes, in the same dtypes: MLflow enforces the logged signature's dtypes and
history length exactly) and returns float32 click probabilities, one per row. The model
carries its own copy of the ``components`` package (code_paths), so it loads
wherever its pip requirements are installed. It is logged as "models from
code" (``model_code.py``), so loading it unpickles nothing.
"""

from __future__ import annotations

import warnings

import mlflow.pyfunc
import numpy as np

DEFAULT_BATCH = 8192


# MLflow inspects predict's type hints when the class is created; we have none on purpose
# (the logged signature validates inputs), so its advice to add some is noise here.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*type hints", category=UserWarning)

    class DailyrecModel(mlflow.pyfunc.PythonModel):
        """Click probabilities for a batch of feature arrays."""

        def load_context(self, context):
            from components.train.inference import load_scorer

            self.scorer = load_scorer(context.artifacts["checkpoint"])

        # no type hints: MLflow would build a (wrong) schema from them; the logged signature rules
        def predict(self, context, model_input, params=None):
            from components.train.inference import check_inputs, chunks, predict_logits, sigmoid

            if hasattr(model_input, "to_dict") and not isinstance(model_input, dict):  # a DataFrame
                model_input = {k: np.stack(v.to_numpy()) if v.dtype == object else v.to_numpy()
                               for k, v in model_input.items()}
            arrays = {k: np.asarray(v) for k, v in model_input.items()}
            rows = check_inputs(arrays, self.scorer.vocab)
            batch = int((params or {}).get("batch_size", DEFAULT_BATCH))
            logits = predict_logits(self.scorer.model, chunks(arrays, rows, batch))
            return sigmoid(logits).astype(np.float32)
