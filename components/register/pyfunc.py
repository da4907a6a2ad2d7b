"""The registered model: an MLflow pyfunc that scores raw-id requests with a dailyrec checkpoint.

``mlflow.pyfunc.load_model("models:/NAME@champion").predict(frame)`` takes a
pandas DataFrame in the raw contract's terms (``user_id``, ``item_id``,
optional ``category_id``, ``timestamp``, and optionally the user's earlier
events; :mod:`components.score.features` describes the columns) and returns
float32 click probabilities, one per row. Hashing, bucketing, histories and the
count features are computed inside, by preprocess's own code, from the
request's events or from the version's snapshot of its training window
(``count_state.npz``, ``user_state.npz``). ``mlflow models serve``
answers a bad request with HTTP 400 and a one-line reason.

The model carries its own copy of the ``components`` package (code_paths), so
it loads wherever its pip requirements are installed. It is logged as "models
from code" (``model_code.py``), so loading it unpickles nothing.
"""

from __future__ import annotations

import time
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

from components.score.protocol import BadRequest, Overdue


class DailyrecModel(mlflow.pyfunc.PythonModel):
    """Click probabilities for a table of raw-id requests."""

    def load_context(self, context) -> None:
        from components.score.features import Layout, Snapshot
        from components.train.inference import load_scorer

        self.scorer = load_scorer(context.artifacts["checkpoint"])
        self.layout = Layout.of(self.scorer.vocab)
        self.snapshot = Snapshot.load(
            context.artifacts["count_state"], context.artifacts.get("user_state")
        )

    # pd.DataFrame: MLflow validates nothing from this hint (the logged signature names the columns)
    def predict(
        self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> np.ndarray:
        if not isinstance(model_input, pd.DataFrame):
            raise BadRequest(
                f"expected a table of requests (columns user_id, item_id, timestamp ...), "
                f"got {type(model_input).__name__}"
            )
        from components.score.protocol import ProtocolError, check_params

        try:
            batch = check_params(params or {})["batch_size"]
        except ProtocolError as exc:
            raise BadRequest(str(exc)) from None
        return self.score(model_input, batch)

    def score(self, frame: pd.DataFrame, batch: int, deadline: float | None = None) -> np.ndarray:
        """Probabilities of a request table's rows, scored ``batch`` rows at a time; past
        ``deadline`` (``time.monotonic()``) it stops between batches with :class:`Overdue`."""
        from components.score.features import RequestError, request_inputs
        from components.train.inference import check_inputs, chunks, predict_logits, sigmoid
        from components.train.model import BATCH_KEYS

        try:
            arrays = request_inputs(frame.reset_index(drop=True), self.snapshot, self.layout)
            arrays = {k: arrays[k] for k in BATCH_KEYS}
            rows = check_inputs(arrays, self.scorer.vocab)
        except (RequestError, ValueError, TypeError) as exc:
            raise BadRequest(str(exc)) from None
        batches = chunks(arrays, rows, batch)
        logits = predict_logits(
            self.scorer.model, batches if deadline is None else _until(deadline, batches)
        )
        return sigmoid(logits).astype(np.float32)


def _until(deadline: float, batches):
    for batch in batches:
        if time.monotonic() > deadline:
            raise Overdue("scoring passed the server's request timeout")
        yield batch
