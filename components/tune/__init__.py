"""Hyperparameter search for the BST model: an Optuna study whose pruner (ASHA / Hyperband)
stops weak trials after an epoch or a few, each trial a real ``train()``; the best
configuration is written as a model config file the daily pipeline takes as ``model_config``.

The file format itself (:mod:`components.train.tuned`) lives beside ``model_config()``, so
the estimate stage reads it without importing this package; optuna is only needed by
:mod:`components.tune.study`.
"""
