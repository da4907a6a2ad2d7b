"""The search: an Optuna study over :class:`SearchSpace`, each trial a real ``train()``.

* **Base**: the estimate stage plans the base model on the hardware profile; the
  architectures of the space are filtered by that plan's memory model (space.py).
* **Trial** (trial.py): its parameters are written as a model config file (the tuned format,
  with a ``train`` block) and planned by the estimate stage as the daily pipeline plans the
  winner (the same shape; no speed probe: trial.PLAN_PROBE), then trained in this process on
  one training process at the same global batch (accumulation absorbs the processes: same
  rows per step, the same large-batch gradient up to float rounding; only dropout's random
  masks differ from a 2-process run). :class:`TrialRunner` runs one trial.
* **Pruning**: after each epoch the trial reports its best validation AUC so far
  (``trial.report(best, epochs)``); when ASHA (``SuccessiveHalvingPruner``) or Hyperband
  says prune, ``on_epoch`` returns False and the trainer stops there. The last epoch is
  never pruned (nothing left to save).
* **Tracking**: with a tracking URI, one MLflow run per trial (params, ``val_auc`` and
  ``best_val_auc`` per epoch with step = epochs trained, tag ``state`` pruned / complete /
  failed) nested under one run for the study, in experiment ``dailyrec-tune``.
* **Storage**: SQLite in the output folder (default): a killed search resumes where it
  stopped (its unfinished trial is failed and enqueued again); ``memory`` for throwaway runs.
* **Settings**: :class:`TuneConfig` (config.py), one field per setting.
* **Output**: ``OUT/tuned.json`` (the best complete trial, format in tuned.py; give its path
  as the daily pipeline's ``model_config``), ``OUT/tune_summary.json``, ``OUT/trials/NNN/``
  (config.json, plan.json, train_summary.json; checkpoints deleted unless kept).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from components.common.plan import TrainPlan
from components.common.progress import get_logger
from components.common.runs import PLAN
from components.common.storage import atomic_write_json
from components.common.train_summary import TrainSummary
from components.tune.config import TuneConfig
from components.tune.space import (
    Architectures,
    feasible_architectures,
    suggest,
)

log = get_logger(__name__)
TUNED_FILE = "tuned.json"
SUMMARY_FILE = "tune_summary.json"
STUDY_DB = "study.db"
MAX_CONSECUTIVE_FAILURES = 3


class TuneError(RuntimeError):
    """The search cannot run or produced no usable trial; the message says why."""


# ----------------------------------------------------------------------------- tracking


class Tracker:
    """The study's MLflow runs. After a successful connect, a failing call is logged and
    tracking stops: losing curves must not lose hours of search."""

    def __init__(self, config: TuneConfig) -> None:
        self.client = self.parent = None
        self.experiment_id = ""
        if not config.tracking_uri:
            return
        from components.common.tracking import connect, ensure_experiment

        self.client = connect(config.tracking_uri)
        self.experiment_id = ensure_experiment(self.client, config.experiment, config.tracking_uri)
        self.parent = self._call(
            lambda: (
                self.client.create_run(
                    self.experiment_id,
                    run_name=config.study_name,
                    tags={"dailyrec.kind": "study", "dailyrec.study": config.study_name},
                ).info.run_id
            )
        )
        self._params(
            self.parent,
            {
                **config.settings(),
                "trials": config.trials,
                "space": json.dumps(config.space.as_dict()),
            },
        )

    def _call(self, fn):
        if self.client is None:
            return None
        try:
            return fn()
        except Exception as exc:  # tracking is best-effort once the search runs
            log.warning(
                "MLflow call failed (%s: %s); tracking off for the rest of the search",
                type(exc).__name__,
                str(exc)[:200],
            )
            self.client = None
            return None

    def _params(self, run_id: str | None, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        if run_id:
            self._call(
                lambda: self.client.log_batch(
                    run_id, params=[Param(k, str(v)[:500]) for k, v in sorted(params.items())]
                )
            )

    def start_trial(self, number: int, params: dict[str, Any], study: str) -> str | None:
        tags = {"dailyrec.kind": "trial", "dailyrec.study": study, "dailyrec.trial": str(number)}
        if self.parent:
            tags["mlflow.parentRunId"] = self.parent
        run_id = self._call(
            lambda: (
                self.client.create_run(
                    self.experiment_id, run_name=f"trial-{number:03d}", tags=tags
                ).info.run_id
            )
        )
        self._params(run_id, {**params, "trial": number})
        return run_id

    def epoch(self, run_id: str | None, record: dict[str, Any], best: float) -> None:
        from mlflow.entities import Metric

        if not run_id:
            return
        now, step = int(time.time() * 1000), int(record["epoch"]) + 1
        values = {
            "val_auc": record["val_auc"],
            "best_val_auc": best,
            "train_loss": record.get("train_loss"),
            "val_logloss": record.get("val_logloss"),
            "epoch_seconds": record.get("seconds"),
        }
        metrics = [
            Metric(k, float(v), now, step)
            for k, v in values.items()
            if isinstance(v, int | float) and math.isfinite(v)
        ]
        self._call(lambda: self.client.log_batch(run_id, metrics=metrics))

    def finish_trial(
        self, run_id: str | None, state: str, epochs: int, value: float | None
    ) -> None:
        if not run_id:
            return
        self._call(lambda: self.client.set_tag(run_id, "state", state))
        self._call(lambda: self.client.log_metric(run_id, "epochs", epochs))
        if value is not None and math.isfinite(value):
            self._call(lambda: self.client.log_metric(run_id, "objective", value))
        self._call(
            lambda: self.client.set_terminated(
                run_id, "FAILED" if state == "failed" else "FINISHED"
            )
        )

    def finish(self, summary: dict[str, Any] | None, failed: bool = False) -> None:
        if not self.parent:
            return
        if summary:
            numbers = {
                k: summary[k]
                for k in ("trials", "complete", "pruned", "failed", "epochs_spent", "best_val_auc")
                if isinstance(summary.get(k), int | float)
            }
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            metrics = [Metric(k, float(v), now, 0) for k, v in numbers.items()]
            self._call(lambda: self.client.log_batch(self.parent, metrics=metrics))
            self._params(
                self.parent, {f"best.{k}": v for k, v in (summary.get("best_params") or {}).items()}
            )
            self._call(lambda: self.client.log_dict(self.parent, summary, SUMMARY_FILE))
        self._call(
            lambda: self.client.set_terminated(self.parent, "FAILED" if failed else "FINISHED")
        )


# ----------------------------------------------------------------------------- study pieces


@dataclass(frozen=True)
class Base:
    """What every trial shares: the base plan and model, the dataset's vocab, the architectures."""

    plan: TrainPlan
    model: Any
    vocab: Any
    profile: Any
    archs: Architectures
    train_rows: int
    fingerprint: str | None


def plan_base(config: TuneConfig) -> Base:
    """Plan the base model with the estimate stage; filter the architectures by its memory model."""
    from components.common.dataset_meta import DatasetMeta
    from components.estimate.hardware import load_profile
    from components.estimate.planner import EstimateConfig, estimate
    from components.train.model import Vocab, model_config
    from components.tune.trial import PLAN_PROBE

    doc = estimate(
        EstimateConfig(
            data=config.data,
            model=config.base_model,
            hardware=config.hardware,
            global_batch=config.global_batch,
            max_epochs=config.max_epochs,
            memory_fraction=config.memory_fraction,
            probe=PLAN_PROBE,
        )
    )
    meta = DatasetMeta.read(config.data)
    vocab, profile, base_model = (
        Vocab.from_meta(meta),
        load_profile(config.hardware),
        model_config(config.base_model),
    )
    archs = feasible_architectures(
        config.space, base_model, vocab, profile, doc["train"], config.memory_fraction
    )
    return Base(
        doc["train"],
        base_model,
        vocab,
        profile,
        archs,
        meta.split("train").rows,
        meta.fingerprint,
    )


def build_pruner(config: TuneConfig):
    import optuna

    if config.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=config.min_epochs, reduction_factor=config.reduction_factor
        )
    if config.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=config.min_epochs,
            max_resource=config.max_epochs,
            reduction_factor=config.reduction_factor,
        )
    return optuna.pruners.NopPruner()


def build_sampler(config: TuneConfig):
    import optuna

    if config.sampler == "random":
        return optuna.samplers.RandomSampler(seed=config.seed)
    return optuna.samplers.TPESampler(seed=config.seed)


def open_study(config: TuneConfig):
    """Create the study, or load the one in OUT (same settings), failing its interrupted trial."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = (
        f"sqlite:///{(Path(config.out).resolve() / STUDY_DB).as_posix()}"
        if config.storage == "sqlite"
        else None
    )
    study = optuna.create_study(
        storage=storage,
        sampler=build_sampler(config),
        pruner=build_pruner(config),
        study_name=config.study_name,
        direction="maximize",
        load_if_exists=True,
    )
    settings = config.settings()
    found = study.user_attrs.get("settings")
    if found is None:
        study.set_user_attr("settings", settings)
        for params in config.enqueue:
            study.enqueue_trial(params, skip_if_exists=False)
    elif found != settings:
        changed = sorted(k for k in settings if found.get(k) != settings[k])
        raise TuneError(
            f"{config.out}: holds a study with other settings ({', '.join(changed)}); "
            f"use another output folder, or delete {STUDY_DB} to start over"
        )
    else:
        for stale in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            # one tuner per folder: a trial still RUNNING was cut off by a crash; retry it
            log.warning("trial %d was interrupted: marked failed and enqueued again", stale.number)
            study.tell(stale.number, state=TrialState.FAIL)
            study.enqueue_trial(stale.params)
    return study


# ----------------------------------------------------------------------------- the search


def report_epoch(trial: Any, best: float, epochs: int, max_epochs: int) -> bool:
    """Report a trial's best validation AUC after ``epochs``; True when the pruner stops it
    (never after the last epoch: there is nothing left to save)."""
    trial.report(best, epochs)
    return epochs < max_epochs and trial.should_prune()


class _TrialFailed(RuntimeError):
    """One trial's training failed; the study goes on (Optuna records it as FAIL)."""


class TrialProgress:
    """One trial while it trains: its parameters and folder, its MLflow run, the epochs seen, the
    best validation AUC so far and the epoch the pruner stopped it at (None: not pruned)."""

    def __init__(
        self, trial: Any, params: dict[str, Any], folder: Path, tracker: Tracker, config: TuneConfig
    ) -> None:
        self.trial, self.params, self.folder = trial, params, folder
        self.tracker, self.max_epochs = tracker, config.max_epochs
        self.run_id = tracker.start_trial(trial.number, params, config.study_name)
        self.seen: list[dict] = []
        self.best = -math.inf
        self.pruned_at: int | None = None

    def on_epoch(self, record: dict) -> bool:
        """The trainer's per-epoch callback: report, track; False when the pruner stops it."""
        self.seen.append(record)
        epochs = self._record(record)
        if report_epoch(self.trial, self.best, epochs, self.max_epochs):
            self.pruned_at = epochs
            return False
        return True

    def catch_up(self, history: list[dict]) -> None:
        """Report the epochs the callback did not see (an early-stopped last epoch skips it)."""
        for record in history[len(self.seen) :]:
            self.trial.report(self.best, self._record(record))

    def _record(self, record: dict) -> int:
        self.best = max(self.best, record["val_auc"])
        self.tracker.epoch(self.run_id, record, self.best)
        return int(record["epoch"]) + 1


class TrialRunner:
    """The study's objective: one trial = its parameters written as a model config, planned by
    the estimate stage, trained in this process with the pruner watching each epoch, its outcome
    recorded on the Optuna trial and in MLflow. Three failed trials in a row stop the search."""

    def __init__(self, config: TuneConfig, base: Base, tracker: Tracker) -> None:
        self.config, self.base, self.tracker = config, base, tracker
        self.consecutive_failures = 0

    def optimize(self, study: Any) -> None:
        """Run trials until ``config.trials`` are complete or pruned (failed ones do not count),
        or the timeout passes."""
        import optuna
        from optuna.trial import TrialState

        done = (TrialState.COMPLETE, TrialState.PRUNED)
        remaining = self.config.trials - len(study.get_trials(deepcopy=False, states=done))
        if remaining <= 0:
            return
        log.info(
            "searching: %d trial(s) to go (%s pruner, %s sampler, at most %d epochs each)",
            remaining,
            self.config.pruner,
            self.config.sampler,
            self.config.max_epochs,
        )
        study.optimize(
            self,
            catch=(_TrialFailed,),
            gc_after_trial=True,
            callbacks=[optuna.study.MaxTrialsCallback(self.config.trials, states=done)],
            timeout=self.config.timeout_hours * 3600 if self.config.timeout_hours else None,
        )

    def __call__(self, trial: Any) -> float:
        params = suggest(trial, self.config.space, self.base.archs)
        folder = Path(self.config.out) / "trials" / f"{trial.number:03d}"
        progress = TrialProgress(trial, params, folder, self.tracker, self.config)
        try:
            model_file, summary = self._train(progress)
        except Exception as exc:
            self._failed(progress, exc)
        self.consecutive_failures = 0
        progress.catch_up(list(summary.history))
        return self._finish(progress, model_file, summary)

    def _train(self, progress: TrialProgress) -> tuple[Path, TrainSummary]:
        from components.train.trainer import TrainConfig, train
        from components.tune.trial import write_trial

        config, folder = self.config, progress.folder
        model_file, plan_file, _ = write_trial(
            (folder / "config.json", folder / PLAN),
            f"{config.name}-trial-{progress.trial.number:03d}",
            self.base.model,
            progress.params,
            {"study": config.study_name},
            config,
            nproc_per_node=1,
        )
        summary = train(
            TrainConfig(data=config.data, out=str(folder / "train"), plan=str(plan_file)),
            on_epoch=progress.on_epoch,
        )
        return model_file, summary

    def _failed(self, progress: TrialProgress, exc: Exception) -> NoReturn:
        self.consecutive_failures += 1
        trial, epochs = progress.trial, len(progress.seen)
        trial.set_user_attr("epochs", epochs)
        trial.set_user_attr("error", f"{type(exc).__name__}: {exc}"[:500])
        self.tracker.finish_trial(progress.run_id, "failed", epochs, None)
        log.error("trial %d failed: %s: %s", trial.number, type(exc).__name__, exc)
        if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
            raise TuneError(
                f"{self.consecutive_failures} trials in a row failed; last: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        raise _TrialFailed(str(exc)) from exc

    def _finish(self, progress: TrialProgress, model_file: Path, summary: TrainSummary) -> float:
        import optuna

        trial, pruned = progress.trial, progress.pruned_at is not None
        epochs, best = summary.epochs_run, summary.best_val_auc
        for key, value in (
            ("epochs", epochs),
            ("seconds", round(summary.seconds, 1)),
            ("early_stopped", summary.early_stopped and not pruned),
            ("config_file", str(model_file)),
            ("best_val_auc", best),
        ):
            trial.set_user_attr(key, value)
        if not self.config.keep_checkpoints:
            for ckpt in (progress.folder / "train").glob("*.pt"):
                ckpt.unlink()
        self.tracker.finish_trial(progress.run_id, "pruned" if pruned else "complete", epochs, best)
        log.info(
            "trial %d: %s after %d epoch(s), best val AUC %.4f  (%s)",
            trial.number,
            "PRUNED" if pruned else "complete",
            epochs,
            best,
            _format_params(progress.params),
        )
        if pruned:
            raise optuna.TrialPruned(f"pruned after epoch {progress.pruned_at}")
        return float(best)


def tune(config: TuneConfig) -> dict[str, Any]:
    """Run (or resume) the search; write tuned.json and tune_summary.json; return the summary."""
    started = time.perf_counter()
    Path(config.out).mkdir(parents=True, exist_ok=True)
    base = plan_base(config)  # planner, hardware, dataset, space errors: ValueErrors with one line
    log.info(
        "base plan: %s, micro-batch %d x accum %d x %d process(es) = global batch %d\n%s",
        config.base_model,
        base.plan.micro_batch,
        base.plan.grad_accum,
        base.plan.world_size,
        base.plan.global_batch,
        base.archs.table(),
    )
    study = open_study(config)
    tracker = Tracker(config)
    summary = None
    try:
        TrialRunner(config, base, tracker).optimize(study)
        summary = summarize(config, study, base, time.perf_counter() - started)
    finally:
        tracker.finish(summary, failed=summary is None)
    return summary


def _format_params(params: dict[str, Any]) -> str:
    return "  ".join(
        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items()
    )


@dataclass(frozen=True)
class Outcome:
    """The study's trials counted: what tuned.json and the summary report."""

    trials: list
    complete: int
    pruned: int
    failed: int

    @classmethod
    def of(cls, study: Any) -> Outcome:
        from optuna.trial import TrialState

        trials = study.get_trials(deepcopy=False)

        def count(state: TrialState) -> int:
            return sum(t.state == state for t in trials)

        return cls(
            trials, count(TrialState.COMPLETE), count(TrialState.PRUNED), count(TrialState.FAIL)
        )

    @property
    def unfailed(self) -> int:
        """Trials not failed, waiting ones included (the cost of the search without pruning)."""
        from optuna.trial import TrialState

        return sum(t.state != TrialState.FAIL for t in self.trials)

    @property
    def epochs_spent(self) -> int:
        return sum(int(t.user_attrs.get("epochs", 0)) for t in self.trials)

    def rows(self) -> list[dict[str, Any]]:
        """One row per trial for the summary file."""
        return [
            {
                "trial": t.number,
                "state": t.state.name.lower(),
                "value": t.value,
                "epochs": t.user_attrs.get("epochs"),
                "params": t.params,
                "error": t.user_attrs.get("error"),
            }
            for t in self.trials
        ]


def summarize(config: TuneConfig, study: Any, base: Base, seconds: float) -> dict[str, Any]:
    """Write tuned.json (best complete trial) and tune_summary.json; return the summary."""
    from components.tune.trial import write_trial_config

    outcome = Outcome.of(study)
    if not outcome.complete:
        raise TuneError(
            f"no trial completed ({outcome.pruned} pruned, {outcome.failed} failed): "
            "nothing to write"
        )
    best = study.best_trial
    search = {
        "trials": outcome.complete + outcome.pruned,
        "complete": outcome.complete,
        "pruned": outcome.pruned,
        "failed": outcome.failed,
        "best_val_auc": best.value,
        "best_trial": best.number,
        "best_params": best.params,
        "epochs_spent": outcome.epochs_spent,
        "epochs_if_unpruned": outcome.unfailed * config.max_epochs,
        "pruner": config.pruner,
        "reduction_factor": config.reduction_factor,
        "min_epochs": config.min_epochs,
        "max_epochs": config.max_epochs,
        "sampler": config.sampler,
        "seed": config.seed,
        "base_model": config.base_model,
        "hardware": config.hardware,
        "global_batch": config.global_batch,
        "dataset": {
            "path": str(config.data),
            "train_rows": base.train_rows,
            "fingerprint": base.fingerprint,
        },
        "study": config.study_name,
        "seconds": round(seconds, 1),
    }
    tuned = write_trial_config(
        Path(config.out) / TUNED_FILE,
        config.name,
        base.model,
        best.params,
        config.global_batch,
        search,
    )
    summary = {
        **search,
        "tuned_file": str(tuned),
        "settings": config.settings(),
        "trial_rows": outcome.rows(),
    }
    atomic_write_json(Path(config.out) / SUMMARY_FILE, summary)
    return summary


def summary_text(summary: dict[str, Any]) -> str:
    """A few lines for people: the outcome, the cost, where the file is."""
    spent, full = summary["epochs_spent"], summary["epochs_if_unpruned"]
    params = _format_params(summary["best_params"])
    return "\n".join(
        [
            f"search   {summary['trials']} trials ({summary['complete']} complete, "
            f"{summary['pruned']} pruned, {summary['failed']} failed), {summary['pruner']} pruner, "
            f"{summary['sampler']} sampler",
            f"best     val AUC {summary['best_val_auc']:.4f} (trial {summary['best_trial']}): "
            f"{params}",
            f"cost     {spent} epochs of at most {full} ({spent / max(full, 1):.0%}), "
            f"{summary['seconds']:.0f}s",
            f"tuned    {summary['tuned_file']}  (daily pipeline: model_config=<this file>)",
        ]
    )


def remove_trial_outputs(out: str | Path) -> None:
    """Delete a previous search in ``out`` (study, trials, results): a fresh start."""
    out = Path(out)
    for name in (STUDY_DB, TUNED_FILE, SUMMARY_FILE):
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "trials", ignore_errors=True)
