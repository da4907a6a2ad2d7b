"""Score a preprocessed split with a registered model, as a serving client would.

``python -m components.register.score --model models:/dailyrec@champion --data DIR
[--split test] [--rows N] [--tracking-uri URI]`` prints the AUC on those rows
and the first predictions: the whole client side is ``mlflow.pyfunc.load_model``
and ``predict`` on a dict of the Dataset contract's arrays.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from components.common.cli import HelpFormatter
from components.common.metrics import roc_auc
from components.common.tracking import TrackingError, connect
from components.register.integrity import IntegrityError
from components.register.stage import default_tracking_uri
from components.train.data import DatasetError, load_meta
from components.train.inference import split_rows
from components.train.model import BATCH_KEYS


def score(model_uri: str, data: str, split: str = "test", rows: int | None = None,
          tracking_uri: str | None = None) -> dict:
    """Probabilities and AUC of ``model_uri`` (a registered version) on the first ``rows`` rows of a split.

    The model is downloaded and checked against its registration digest before
    MLflow loads it (and runs its code): a changed artifact is refused."""
    import tempfile

    import mlflow.pyfunc

    from components.register.integrity import resolve, verified_download

    client = connect(tracking_uri or default_tracking_uri())
    name, version = resolve(client, model_uri)
    meta = load_meta(data, splits=(split,))
    with tempfile.TemporaryDirectory(prefix="dailyrec-score-") as tmp:
        model = mlflow.pyfunc.load_model(str(verified_download(client, name, version, tmp)))
    batch = next(iter(split_rows(data, split, meta, rows or meta["splits"][split]["rows"])))
    prob = model.predict({k: batch[k] for k in BATCH_KEYS})
    return {"model_uri": model_uri, "rows": len(prob), "auc": roc_auc(prob, batch["label"]),
            "mean_prediction": float(np.mean(prob)), "positive_rate": float(np.mean(batch["label"])),
            "first_predictions": [round(float(p), 5) for p in prob[:5]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m components.register.score", formatter_class=HelpFormatter,
                                description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models:/dailyrec@champion", help="model URI")
    p.add_argument("--data", required=True, help="preprocessed dataset folder")
    p.add_argument("--split", default="test", help="dataset split to score: train | val | test")
    p.add_argument("--rows", type=int, default=10000, help="first rows of the split to score")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI, else sqlite:///runs/mlflow.db)")
    args = p.parse_args(argv)
    try:
        result = score(args.model, args.data, args.split, args.rows, args.tracking_uri)
    except (TrackingError, IntegrityError, DatasetError, ValueError, OSError) as exc:
        print(f"score: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # e.g. MlflowException for an unknown model or alias
        print(f"score: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
