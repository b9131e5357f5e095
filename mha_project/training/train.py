"""``train(cfg)``: data -> model -> compile -> fit with callbacks -> test once -> save: the recipe, top to bottom.

Every part is a config node that ``hydra.utils.instantiate`` builds (``build``): ``cfg.data`` (a ``TextData``),
``cfg.model`` (a ``TextClassifier`` on its backbone), ``cfg.optimizer``, ``cfg.loss``, ``cfg.callbacks`` (more
Keras callbacks), ``cfg.trainer.strategy`` (the devices); an extra is a config choice of another ``_target_``.
A run directory (``cfg.run_dir``: Hydra's output dir) ends up holding:

    .hydra/config.yaml   the composed config, written once every check has passed
    run.json             the run's format and last finished stage (mha_project/run_dir.py)
    vocab.txt            the vocabulary            model_summary.txt   the model's layers
    history.csv          one row per epoch         checkpoints/        the best epoch's weights
    tensorboard/         scalars and attention     model.keras         the trained classifier
    metrics.json         written last: the run finished
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mha_project.quiet import import_tensorflow_quietly

import_tensorflow_quietly()  # the API's first TensorFlow import (a notebook's): its C++ start-up lines hidden

import keras
import numpy as np
import tensorflow as tf
from omegaconf import DictConfig, OmegaConf, open_dict

from mha_project.atomic import replaced_atomically, write_json_atomic, write_text_atomic
from mha_project.config import SHORTCUTS, build, hparams_of, validate_config
from mha_project.data.vocabulary import save_vocabulary
from mha_project.errors import ConfigError, UserError
from mha_project.model.backbone import encoder_blocks
from mha_project.model.classifier import model_summary, uncompiled_copy
from mha_project.run_dir import METRICS_FILE, MODEL_FILE, VOCAB_FILE, RunRecord, new_run
from mha_project.training.callbacks import tensorboard_callbacks, write_chosen
from mha_project.training.fit import (
    BestWeights,
    FitPlan,
    ResumedEarlyStopping,
    best_of,
    diverged_message,
    fit_resumably,
    monitor_mode,
    plan_fit,
    trained_results,
)
from mha_project.training.schedules import warmup_cosine

log = logging.getLogger(__name__)

BEST_WEIGHTS = Path("checkpoints") / "best.weights.h5"  # inside the run directory


def train(cfg: DictConfig, run_dir=None) -> dict:
    """Train one model as configured; write the run directory; return the metrics dict. ``run_dir`` (a test,
    a notebook) stands for Hydra's output dir. With the run_record extra, the same config again resumes a
    killed run where it stopped, and a finished one returns its metrics untouched."""
    cfg = with_run_dir(cfg, run_dir)
    validate_config(cfg)  # before any data is loaded or file written
    check_activation(cfg)

    # 1. The process: the devices it trains on (trainer.strategy), seeds, determinism, the run directory.
    strategy = build(cfg.trainer.strategy) if cfg.trainer.strategy else tf.distribute.get_strategy()
    keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    open_run = build(cfg.run_record) if cfg.get("run_record") else new_run  # run_record: one that resumes
    with open_run(cfg, Path(cfg.run_dir)) as record:
        run_dir = record.path
        if record.finished:
            return already_finished(record)

        # 2. Text -> token ids: the splits, the run's vocabulary (a resumed run's own), the pipelines.
        splits = build(cfg.data).splits(cfg.seed)
        log.info(
            f"data: {splits.name} · classes {splits.class_names} · train {len(splits.train_texts)} · "
            f"val {len(splits.val_texts)} · test {len(splits.test_texts)}"
        )
        cfg = follow_the_data(cfg, splits, record)  # trainer.schedule_from_data: what the splits decide
        data = build(cfg.data)  # after the rule: what it decides may include the data's settings (seq_len, truncation)
        resuming = record.stage != "started" or bool(record.previous_epochs(run_dir))
        preprocessor = data.preprocessor(splits.train_texts, cfg.seed, run_dir / VOCAB_FILE if resuming else None)
        part = (getattr(strategy, "process_id", 0), getattr(strategy, "num_processes", 1))  # several processes

        def batches(texts, labels, shuffle=False, batch_size=cfg.trainer.batch_size, part=(0, 1), text_inputs=None):
            return data.pipeline(texts, labels, preprocessor, batch_size, cfg.seed, shuffle=shuffle, part=part,
                                 text_inputs=text_inputs)  # fmt: skip

        train_ids = batches(splits.train_texts, splits.train_labels, shuffle=True, part=part)
        plan = plan_fit(cfg.trainer, train_ids, len(splits.train_texts))
        save_run_config(cfg, run_dir)  # every check has passed: the record now describes this run
        save_vocabulary(preprocessor.vectorizer, run_dir / VOCAB_FILE)

        # 3. The model: the classifier on its backbone (pretrained by a stage before the fit, if configured).
        with strategy.scope():
            backbone = None
            if cfg.get("pretrain") is not None:  # a stage that gives the backbone (the pretraining extra)
                backbone = build(cfg.pretrain)(cfg, data, splits, preprocessor, record, strategy)
            model = build_model(cfg, preprocessor.vectorizer.vocabulary_size(), splits.num_classes, backbone)
        text_inputs = getattr(model, "text_inputs", None)  # what else the model reads of the raw text (a bag)
        train_ds = train_ids
        if text_inputs is not None:
            train_ds = batches(splits.train_texts, splits.train_labels, True, part=part, text_inputs=text_inputs)
        # Validation on every process: each feeds all of it in batches of batch_size / processes, so each global
        # batch holds every text `processes` times, which leaves accuracy and mean loss unchanged.
        val_ds = batches(splits.val_texts, splits.val_labels, batch_size=cfg.trainer.batch_size // part[1],
                         text_inputs=text_inputs)  # fmt: skip
        test_ds = batches(splits.test_texts, splits.test_labels, text_inputs=text_inputs)
        with strategy.scope():
            if hasattr(model, "adapt"):  # what a part learns from the data before the fit (a bag's ratios, its C)
                adapt(model, batches(splits.train_texts, splits.train_labels, text_inputs=text_inputs), val_ds, record,
                      run_dir / "tensorboard" if cfg.logger.tensorboard else None)  # fmt: skip
            summary = model_summary(model)  # before compile: the model's parameters, not the optimizer's
            compile_model(model, cfg, plan.total_steps)
        write_text_atomic(run_dir / "model_summary.txt", summary)
        log.info("model:\n" + summary)

        # 4. fit, with the callbacks that keep the best weights, stop early, log attention, and the config's own.
        if not record.done("trained"):
            fit_stage(cfg, record, model, train_ds, val_ds, splits, preprocessor, plan, strategy)
        local = getattr(strategy, "local_copy", lambda model: model)(model)  # several processes: this one's
        if local is not model:
            model = local
            compile_model(model, cfg, plan.total_steps)

        # 5. The test, once, on the best epoch's weights; then model.keras.
        evaluate_and_save(model, test_ds, record)

        # 6. metrics.json, written last: its presence means the run finished.
        metrics = collect_metrics(cfg, record, model, splits)
        write_json_atomic(run_dir / METRICS_FILE, metrics)
        record.finish_stage("finished")
        return metrics


def adapt(model, train_batches, val_ds, record: RunRecord, log_dir: Path | None) -> None:
    """``model.adapt``; what it chose on the validation split is recorded at once, so that a resumed run hands it
    back (``earlier``) rather than choose again, and written to TensorBoard once (``log_dir``)."""
    earlier = record.results.get("chosen")
    chosen = model.adapt(train_batches, val_ds, earlier)
    if chosen:
        log.info(f"chosen on the validation split: {chosen}")
        record.finish_stage(record.stage, chosen=chosen)
        if log_dir is not None and not earlier:
            write_chosen(log_dir, chosen)


def follow_the_data(cfg: DictConfig, splits, record: RunRecord) -> DictConfig:
    """``cfg`` with what ``cfg.trainer.schedule_from_data`` (an extra's ``_target_``) sets for these splits, before
    anything reads it, so that the run's record holds the settings it trained with; logged, kept in run.json."""
    rule = build(cfg.trainer.schedule_from_data) if cfg.trainer.get("schedule_from_data") is not None else None
    decided = rule(splits) if rule is not None else None
    if decided is None:
        return cfg
    why, settings = decided
    cfg = cfg.copy()
    for key, value in settings.items():
        OmegaConf.update(cfg, key, value, merge=False)
    validate_config(cfg)  # a rule's value is checked as the command line's would be
    shown = " ".join(f"{key}={value}" for key, value in settings.items())
    log.info(f"schedule from the data: {why}: {shown} (trainer.schedule_from_data=null keeps the config's own)")
    record.finish_stage(record.stage, schedule={"why": why, "set": settings})
    return cfg


def evaluate_and_save(model, test_ds, record: RunRecord) -> None:
    """Load the best epoch's weights, test them once (``run.json`` keeps the result) and save model.keras."""
    if (record.path / BEST_WEIGHTS).exists():
        model.load_weights(record.path / BEST_WEIGHTS)
    if not record.done("tested"):
        test_loss, test_accuracy = model.evaluate(test_ds, verbose=0)
        record.finish_stage("tested", test_loss=float(test_loss), test_accuracy=float(test_accuracy))
    if not record.done("saved"):
        save_model_atomic(model, record.path / MODEL_FILE)
        record.finish_stage("saved")


def already_finished(record: RunRecord) -> dict:
    """The recorded metrics of a run that finished before; its ``train.log`` is part of the record, so nothing
    is added to it either (Hydra's log handler for it is closed)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == record.path.resolve():
            root.removeHandler(handler)
            handler.close()
    return json.loads((record.path / METRICS_FILE).read_text())


def check_activation(cfg: DictConfig) -> None:
    """``model.backbone.activation`` names a Keras activation (asked of Keras, so only once it is loaded)."""
    name = OmegaConf.select(cfg, "model.backbone.activation")
    try:
        keras.activations.get(name)
    except ValueError:
        raise ConfigError(
            f"model.backbone.activation={name} is invalid: must be a Keras activation name such as gelu, relu, silu"
        ) from None


def build_model(cfg: DictConfig, vocab_size: int, num_classes: int, backbone=None):
    """The configured classifier (``cfg.model``) for this vocabulary and class count, on ``backbone`` (a pretrained
    one) or on the one ``cfg.model.backbone`` builds (none for a bag of n-grams alone)."""
    if backbone is None and cfg.model.backbone is not None:
        backbone = build(cfg.model.backbone, vocab_size=vocab_size)
    # The model node's values, untyped: the backbone given in place of its node is an object, not a config.
    model_node = OmegaConf.to_container(cfg.model, resolve=True)
    return build(model_node, backbone=backbone, num_classes=num_classes, name="mha_classifier")


def compile_model(model, cfg: DictConfig, total_steps: int) -> None:
    """The configured optimizer on the warm-up + cosine schedule, the configured loss, accuracy."""
    schedule = warmup_cosine(cfg.trainer.lr, cfg.trainer.warmup_fraction, total_steps)
    model.compile(
        optimizer=build(cfg.optimizer)(learning_rate=schedule),
        loss=build(cfg.loss),
        metrics=["accuracy"],
        # trainer.jit_compile is TensorFlow's XLA switch; on JAX, not compiling means running op by op.
        jit_compile=cfg.trainer.jit_compile or keras.backend.backend() == "jax",
        steps_per_execution=cfg.trainer.steps_per_execution,
    )
    # The optimizer's slots and the metrics' counters now, not in the first traced step: tf.function traces a
    # function that creates variables twice, so the train step would be traced twice per fit.
    model.optimizer.build(model.trainable_variables)
    classes = int(model.output_shape[-1])
    model.compute_metrics(None, np.zeros((1,), "int32"), np.full((1, classes), 1.0 / classes, "float32"))
    model.reset_metrics()


def fit_stage(cfg, record: RunRecord, model, train_ds, val_ds, splits, preprocessor, plan: FitPlan, strategy):
    """``fit`` with the best weights kept, early stopping, TensorBoard and the config's own callbacks
    (``cfg.callbacks``); records the ``trained`` stage."""
    run_dir = record.path
    previous = record.previous_epochs(run_dir)
    monitor = cfg.trainer.monitor
    mode = monitor_mode(monitor)
    # A bag of n-grams alone has no attention to log.
    attention = cfg.logger.attention if encoder_blocks(model) else None
    probes, labels = (list(attention.probe_texts), None) if attention and attention.probe_texts else ([], None)
    if attention and not probes:
        probes, labels = splits.val_texts[: attention.num_probes], splits.val_labels[: attention.num_probes]
    before_csv = [
        BestWeights(run_dir / BEST_WEIGHTS, monitor, mode, initial_best=best_of(previous, monitor)),
        ResumedEarlyStopping(
            previous,
            monitor=monitor,
            mode=mode,
            patience=cfg.trainer.early_stopping_patience * plan.validations_per_epoch,
            # No restore_best_weights: BestWeights keeps the best epoch on disk (it survives a resume). Patience
            # counts from the end of the warm-up, while the learning rate is still rising.
            start_from_epoch=int(cfg.trainer.warmup_fraction * plan.epochs),
        ),
        *(build(callback) for callback in (cfg.callbacks or {}).values()),
    ]
    after_csv = tensorboard_callbacks(
        cfg.logger,
        run_dir / "tensorboard",
        preprocessor,
        probes,
        label=run_label(run_dir),
        labels=labels,
        class_names=splits.class_names,
        profile_batches=tuple(cfg.logger.profile_batches) or 0,  # (start, stop) batches, 0 = off
        log_initial=not previous,  # step 0, the initial weights: once, by the fit that starts from them
        local=getattr(strategy, "local", None),
    )
    fit = fit_resumably(
        model, train_ds, run_dir, previous, record.backup(run_dir), before_csv=before_csv, after_csv=after_csv,
        validation_data=val_ds,
        validations_per_epoch=plan.validations_per_epoch, epochs=plan.epochs, steps_per_epoch=plan.steps_per_epoch,
    )  # fmt: skip
    if not fit.finite:
        raise UserError(diverged_message(cfg.trainer, fit.counter, run_dir / BEST_WEIGHTS, plan.validations_per_epoch))
    reported = {k: v for callback in before_csv for k, v in getattr(callback, "run_results", {}).items()}
    record.finish_stage("trained", **trained_results(run_dir, fit, plan, len(splits.train_texts), monitor), **reported)


def save_model_atomic(model, path: Path) -> None:
    """``model.save`` without the optimizer (resuming reads ``backup/``, never this file, and the optimizer's
    state is two thirds of the file), to a temporary name, then renamed: a kill mid-save never leaves a broken
    model.keras. Keras's save has no switch to leave the optimizer out: an uncompiled twin is saved."""
    with replaced_atomically(path) as tmp:
        uncompiled_copy(model).save(tmp)


def with_run_dir(cfg: DictConfig, run_dir) -> DictConfig:
    """``cfg`` with ``run_dir`` set (outside Hydra, a test or a notebook names it); the caller's stays as it was."""
    if run_dir is None:
        return cfg
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return cfg


def save_run_config(cfg: DictConfig, run_dir: Path) -> None:
    """``.hydra/config.yaml``, resolved (and Hydra's own ``hydra.yaml`` / ``overrides.yaml`` when run by Hydra).
    Hydra is told not to write these itself (``hydra.output_subdir: null``): it would, before the run directory's
    identity is checked, and a refused run must leave the old run's record untouched."""
    # Resolved: a reader needs none of the resolvers (an extra's) the composition used.
    write_text_atomic(run_dir / ".hydra" / "config.yaml", OmegaConf.to_yaml(with_run_dir(cfg, run_dir), resolve=True))
    hydra = hydra_job(run_dir)
    if hydra is not None:
        write_text_atomic(run_dir / ".hydra" / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra}))
        write_text_atomic(run_dir / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(list(hydra.overrides.task)))


def collect_metrics(cfg: DictConfig, record: RunRecord, model, splits) -> dict:
    """``metrics.json``: what the finished stages recorded, and what the run was."""
    majority = int(np.bincount(np.asarray(splits.train_labels)).argmax())  # what a model that learned nothing says
    return {
        **record.results,
        "params": int(model.count_params()),
        "dataset": splits.name,
        "num_classes": splits.num_classes,
        "class_names": splits.class_names,
        "train_examples": len(splits.train_texts),
        "val_examples": len(splits.val_texts),
        "test_examples": len(splits.test_texts),
        "majority_val_accuracy": float(np.mean(np.asarray(splits.val_labels) == majority)),
        "majority_test_accuracy": float(np.mean(np.asarray(splits.test_labels) == majority)),
        "data_fingerprint": splits.fingerprints(),  # evaluate.py warns when the splits differ from these
        "hparams": hparams_of(cfg, getattr(hydra_job(record.path), "runtime", {}).get("choices")),
    }


def hydra_job(run_dir: Path):
    """Hydra's config of the job running now, when this run is that job (None in a test or a notebook)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    output_dir = hydra.runtime.get("output_dir")
    return hydra if output_dir and Path(output_dir).resolve() == Path(run_dir).resolve() else None


def run_label(run_dir: Path) -> str:
    """How TensorBoard's Attention tab lists this run: the values typed on the command line (empty outside Hydra)."""
    hydra = hydra_job(run_dir)
    if hydra is None:
        return ""
    overrides = [str(o) for o in hydra.overrides.task]
    keys = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    return " ".join(
        o for o, key in zip(overrides, keys) if key in SHORTCUTS or key == "seed" or key.startswith("model.")
    )
