"""Where an extra plugs into the core, so that the core names none of them.

An extra is a package in ``mha_project/extras/``; importing it registers what it adds here: a data source
under its ``data=`` name, a check of its settings, Keras callbacks for the classifier's fit. The entry points
(``scripts/*.py``) import ``mha_project.extras``, which imports every extra present: delete one's folder and
config group and the core runs without it. Importing this module is cheap (no TensorFlow).
"""

from __future__ import annotations

from collections.abc import Callable

# The extras' settings, added to the core's schema (mha_project/config.py): a dataclass per place, "" for new
# top-level groups (pretrain:), "data" / "model" / "trainer" for keys inside those groups.
SETTINGS: dict[str, list[type]] = {}
# Top-level config keys that, besides the core's, decide what model a run directory holds (its identity), and
# dotted keys inside them that do not (a stage's probe texts).
IDENTITY_KEYS: list[str] = []
NOT_IDENTITY: list[str] = []
# Names the run's hyper-parameters are recorded under besides the core's: {name: dotted key} (training/hparams.py).
HPARAMS: dict[str, str] = {}
# Each says why a run of a config has no attention to inspect (a bag of n-grams alone), or None:
# no_attention(cfg) -> str | None.
NO_ATTENTION: list[Callable] = []
# data.name -> loader(data_cfg, seed) -> ((train_texts, train_labels), (test_texts, test_labels), class_names)
DATA_SOURCES: dict[str, Callable] = {}
# data.name -> unlabeled(data_cfg) -> texts without labels, for pretraining (pretrain.extra_unlabeled).
UNLABELED_TEXTS: dict[str, Callable] = {}
# Each runs after the core's own checks of a config (before anything is loaded or written); raises ConfigError.
CHECKS: list[Callable] = []
# Each names words the run's vocabulary must hold (the masked LM's [MASK]): reserved_words(cfg) -> list[str].
RESERVED_WORDS: list[Callable] = []
# Each may open the run directory for train() instead of the core's new_run (a new or empty directory only):
# open_run(cfg, job) -> a context manager giving a run_dir.RunRecord, for the length of the run. The first is taken.
RUN_RECORDS: list[Callable] = []
# Each may give every fit a backup of each epoch to resume from: backup(backup_dir, history_csv) -> a Keras callback
# with restore(model) -> the epochs it had completed (0 without a backup). The first is taken.
FIT_BACKUPS: list[Callable] = []
# Each may run a job itself instead of the core's train (a process other than 0 of a data-parallel run trains in a
# scratch directory): run_job(cfg, job) -> its metrics, or None to leave the job to the core. The first is taken.
JOB_RUNNERS: list[Callable] = []
# Each may give the strategy a run trains under (its devices and processes): strategy(cfg) -> an object with
# scope() and num_replicas_in_sync (and process_id / num_processes when several processes train), or None. The
# first is taken; else TensorFlow's default strategy (this process, its default device).
STRATEGIES: list[Callable] = []
# Each gives the fitted model for what this process does next (the test, save, export): after_fit(cfg, job,
# model, plan) -> a model (process 0's copy of weights trained by several), or None: this process's part ends.
AFTER_FIT: list[Callable] = []
# Each gives, as a context manager, the model a computation on this process alone may run (attention logging
# during a fit of several processes): local(model). The first is taken; else the model itself.
PROCESS_LOCAL: list[Callable] = []
# Each may give the classifier the backbone it starts from (a pretraining stage, or another run's), before the
# run's record is written it checks what it needs: an object with check(cfg, inputs) and
# backbone(cfg, job, record, inputs, strategy) -> an EncoderBackbone or None. The first backbone is taken.
BACKBONE_SOURCES: list = []
# model.position_encoding -> the attention layer of an encoder that has no learned position table (positions
# encoded inside attention): make(**MultiHeadAttention's arguments) -> a keras.layers.MultiHeadAttention.
POSITION_ENCODINGS: dict[str, Callable] = {}
# Each may build the classifier for a config instead of the core's TextClassifier (a wide-and-deep model):
# build(model_cfg, vocab_size, num_classes, backbone, dtype) -> a keras.Model or None. The first is taken.
CLASSIFIERS: list[Callable] = []
# Each prepares a built classifier from the training data before it is compiled (a bag's naive-Bayes ratios):
# ready(cfg, model, inputs).
MODEL_READY: list[Callable] = []
# Each may name inputs the classifier reads from the raw text beside its token ids (a bag of the whole text's
# n-grams): text_inputs(cfg) -> None or a function of a string tensor (batch,) -> {input name: tensor}. The
# first is taken; the pipeline then gives the model {"token_ids": ..., **those}, and the model itself answers
# model.text_inputs(texts) for the same inputs (data/pipeline.py: TextPreprocessor.model_inputs).
TEXT_INPUTS: list[Callable] = []
# Each may give the classifier's optimizer instead of one AdamW (a second rate for part of the model):
# optimizer(model, trainer_cfg, adamw) -> an optimizer or None, adamw(lr) being the run's AdamW at peak lr.
OPTIMIZERS: list[Callable] = []
# Each may give the loss the classifier trains and is evaluated with instead of sparse categorical
# cross-entropy (one-vs-rest): loss(model) -> a keras.losses.Loss or None.
LOSSES: list[Callable] = []
# Each may say, for a dataset built by a known rule, which positions the rule relates, so that the heads
# following each relation can be named (extras/head_analysis/patterns.py): links(data_cfg) -> None or a function
# of a text's words -> {relation: [(query position, key position), ...]}.
RELATION_LINKS: list[Callable] = []
# Modules to import once Keras is loaded, so load_model finds the Keras classes they register.
KERAS_MODULES: list[str] = []
# Each returns Keras callbacks for the classifier's fit: factory(cfg, job) -> list[keras.callbacks.Callback].
FIT_CALLBACKS: list[Callable] = []
# Each writes more TensorBoard records of the probes' attention, inside the attention writer at a step (the
# Attention tab's): write(texts, tokens, scores, captions, run_label, step), ``scores`` one (probes, heads, n, n)
# array per layer, ``captions`` the predictions ("" for a masked LM).
ATTENTION_RECORDS: list[Callable] = []
# Each writes what a run keeps beside model.keras from its trained model (the SavedModel, the head view page),
# within the run's "saved" stage: write(cfg, run_dir, model, inputs), ``inputs`` the run's data and vocabulary.
SAVED_OUTPUTS: list[Callable] = []
# Names an extra writes in a run directory: overwrite=true removes them with the core's (the run record's).
RUN_FILES: list[str] = []
# Each is told how a run ended, after its test: run_end(cfg, job, metrics), metrics None for a run that failed
# (a Keras callback's on_train_end comes before the test and never hears of a failure outside fit).
RUN_END: list[Callable] = []
# Each runs when a sweep starts, before its first job: sweep_start(config), Hydra's node inside it.
SWEEP_START: list[Callable] = []
# Each adds commands to what a finished run suggests next: next_steps(run_dir, attention) -> list[str],
# ``attention`` whether its model has attention to inspect.
NEXT_STEPS: list[Callable] = []
# Each adds a command to what a finished sweep suggests next: sweep_next_step(where) -> str.
SWEEP_NEXT_STEPS: list[Callable] = []
# inspect_attention.py --view NAME besides the heatmap: NAME -> view(heads, heads_per_layer), which checks
# --heads against the run's heads per layer (a UserError) and returns draw(scores_per_layer, tokens, caption) -> figure.
ATTENTION_VIEWS: dict[str, Callable] = {}
# Each adds a section to scripts/sweep_report.py's report: section(sweep_dir) -> {"markdown": ...} or None.
SWEEP_REPORT_SECTIONS: list[Callable] = []


def settings(where: str):
    """Register the decorated dataclass's fields as settings in the schema at ``where`` ("" top level)."""

    def register(schema: type) -> type:
        SETTINGS.setdefault(where, []).append(schema)
        return schema

    return register


def data_source(name: str):
    """Register the decorated loader as ``data=<name>``."""

    def register(loader: Callable) -> Callable:
        DATA_SOURCES[name] = loader
        return loader

    return register


def config_check(check: Callable) -> Callable:
    """Register the decorated function as a check of every config."""
    CHECKS.append(check)
    return check


def fit_callbacks(factory: Callable) -> Callable:
    """Register the decorated factory of Keras callbacks for the classifier's fit."""
    FIT_CALLBACKS.append(factory)
    return factory


def keras_module(name: str) -> None:
    """Register a module of Keras classes: imported now if Keras is, else when it is (``mha_project/__init__``)."""
    import sys

    KERAS_MODULES.append(name)
    if "keras" in sys.modules and "mha_project.training.saving" in sys.modules:
        import_keras_modules()


def import_keras_modules() -> None:
    """Import every registered module of Keras classes (those already imported cost nothing)."""
    import importlib

    for name in KERAS_MODULES:
        importlib.import_module(name)
