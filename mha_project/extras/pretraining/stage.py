"""The pretraining stage: a masked-LM or ELECTRA stage on the training texts before the classifier's fit, or
another run's pretrained backbone (``pretrain.from_run``); the classifier starts from its backbone."""

from __future__ import annotations

import logging
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from omegaconf import OmegaConf

from mha_project.cli import plural
from mha_project.data.pipeline import pipeline_from_cfg
from mha_project.data.sources import concat_texts, select_texts
from mha_project.data.vocabulary import read_vocabulary
from mha_project.errors import ConfigError, UserError, typed
from mha_project.extending import UNLABELED_TEXTS
from mha_project.extras.pretraining.fill_mask import fill_mask, perplexity
from mha_project.extras.pretraining.masking import MASK_TOKEN, mask_id_of, masked_lm_dataset
from mha_project.extras.pretraining.models import build_pretrainer
from mha_project.extras.pretraining.settings import uses_pretraining
from mha_project.run_dir import MODEL_FILE, RUN_FORMAT, STAGE_DIR, other_format, recorded
from mha_project.training.callbacks import tensorboard_callbacks
from mha_project.training.fitting import fit_resumably, previous_epochs, save_model_atomic, warmup_cosine
from mha_project.training.history import read_history
from mha_project.training.hparams import run_label
from mha_project.training.saving import load_model_safely

log = logging.getLogger(__name__)


# The backbone arguments a pretrained run must share with the run that fine-tunes its backbone: all but the
# vocabulary (checked word for word), the dropout rates (the stage has its own) and cls_token (the pooling).
ARCHITECTURE_KEYS = (
    "max_len",
    "embed_dim",
    "num_layers",
    "num_heads",
    "key_dim",
    "ff_dim",
    "value_dim",
    "activation",
    "use_bias",
    "use_gate",
    "sliding_window",
    "norm_first",
    "embedding_norm",
    "position_encoding",
    "local_conv",
)


class PretrainedBackbone:
    """The backbone source (``mha_project/extending.py``) of ``pretrain=mlm|electra`` and ``pretrain.from_run``."""

    def check(self, cfg, inputs) -> None:
        """``pretrain.from_run``'s encoder and vocabulary fit this run: checked before the record is written."""
        self.source = check_pretrained_source(cfg, inputs.preprocessor.vectorizer) if cfg.pretrain.from_run else None

    def backbone(self, cfg, job, record, inputs, strategy):
        """Run the stage (recorded as ``pretrained``; a resumed run after it skips it) and return the
        pretrained backbone with fine-tuning's dropout, or None for a run without pretraining."""
        if not record.done("pretrained"):
            summary = self.source
            if cfg.pretrain.objective != "none":
                texts = inputs.data.train_texts  # the training split only: never validation or test
                if cfg.pretrain.extra_unlabeled:
                    unlabeled = UNLABELED_TEXTS[cfg.data.name](cfg.data)  # a data source's (extending.py)
                    if cfg.data.limit is not None:
                        unlabeled = select_texts(unlabeled, range(min(cfg.data.limit, len(unlabeled))))
                    log.info(f"pretraining also on {len(unlabeled)} unlabeled texts")
                    texts = concat_texts(texts, unlabeled)
                with strategy.scope():
                    stage_dir = job.run_dir / STAGE_DIR
                    summary = run_pretraining(cfg, stage_dir, inputs.preprocessor, texts, run_label(job))
            record.finish_stage("pretrained", pretrain=summary)
        if not uses_pretraining(cfg):
            return None
        saved = Path(cfg.pretrain.from_run or job.run_dir) / STAGE_DIR / MODEL_FILE
        with strategy.scope():
            pretrained = load_model_safely(saved)
            # The classifier's own initial weights must not depend on whether the stage ran in this process
            # (a resume after it) or how much randomness it used; runs without it are untouched.
            keras.utils.set_random_seed(cfg.seed)
            backbone = pretrained_backbone(pretrained, cfg.model)
        log.info(f"backbone initialised from {saved}")
        return backbone


def pretrained_backbone(pretrainer, model_cfg):
    """The classifier's backbone: the pretrained one's shape and weights, with fine-tuning's dropout."""
    return pretrainer.backbone.clone(dropout=model_cfg.dropout, attention_dropout=model_cfg.get("attention_dropout"))


def run_pretraining(cfg, stage_dir: Path, preprocessor, texts, label: str = "") -> dict:
    """Train the masked LM on ``texts`` (resuming from ``stage_dir/backup``); save it; return its summary."""
    pcfg = cfg.pretrain
    stage_dir.mkdir(parents=True, exist_ok=True)
    mask_id = mask_id_of(preprocessor.vectorizer)
    batches = pipeline_from_cfg(
        cfg, texts, np.zeros(len(texts), "int32"), preprocessor, shuffle=True, batch_size=int(pcfg.batch_size)
    )
    dataset = masked_lm_dataset(batches, rate=float(pcfg.mask_rate), mask_id=mask_id, seed=int(cfg.seed))
    steps_per_epoch = int(dataset.cardinality())
    log.info(
        f"pretraining: {pcfg.objective} on {len(texts)} training texts · {plural(pcfg.epochs, 'epoch')} of "
        f"{steps_per_epoch} batches · mask rate {pcfg.mask_rate} · tied embeddings {pcfg.tie_embeddings}"
    )
    model = build_pretrainer(cfg.model, pcfg, preprocessor.vectorizer.vocabulary_size(), dtype=cfg.trainer.precision)
    _compile_pretrainer(model, pcfg, steps_per_epoch)

    previous = previous_epochs(stage_dir)
    after_csv = _stage_loggers(cfg, stage_dir, preprocessor, log_initial=not previous, label=label)
    fit = fit_resumably(
        model,
        dataset,
        stage_dir,
        previous,
        before_csv=[Perplexity()],
        after_csv=after_csv,
        validation=False,
        epochs=int(pcfg.epochs),
    )
    if fit.history.history.get("loss") and not fit.finite:
        raise UserError(
            f"pretraining diverged: the {pcfg.objective} loss became NaN/inf with pretrain.lr={pcfg.lr}; "
            "try a smaller pretrain.lr"
        )
    save_model_atomic(model, stage_dir / MODEL_FILE)
    rows = read_history(stage_dir / "history.csv")
    last = rows[-1] if rows else {}
    return {
        "objective": str(pcfg.objective),
        "epochs": len(rows),
        "texts": len(texts),
        "masked_lm_loss": _float(last.get("masked_lm_loss", last.get("loss"))),
        "masked_accuracy": _float(last.get("masked_accuracy")),
        "replaced_accuracy": _float(last.get("replaced_accuracy")),
        "perplexity": _float(last.get("perplexity")),
        "seconds": round(fit.counter.elapsed_offset + fit.seconds, 3),
        "from": None,
    }


def _compile_pretrainer(model, pcfg, steps_per_epoch: int) -> None:
    optimizer = keras.optimizers.AdamW(
        learning_rate=warmup_cosine(pcfg.lr, pcfg.warmup_fraction, steps_per_epoch * pcfg.epochs),
        weight_decay=pcfg.weight_decay,
        clipnorm=pcfg.clipnorm,
    )
    if pcfg.objective == "mlm":
        model.compile(
            optimizer=optimizer,
            # The mean over the chosen positions only (rows with fewer than P carry weight 0).
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
            weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="masked_accuracy")],
            jit_compile=keras.backend.backend() == "jax",  # op by op on JAX otherwise
        )
    else:  # electra: losses and metrics live in ReplacedTokenDetector.train_step
        model.compile(optimizer=optimizer, jit_compile=False)  # a TensorFlow train_step


def _stage_loggers(cfg, stage_dir: Path, preprocessor, log_initial: bool, label: str = "") -> list:
    """The stage's TensorBoard records: what every fit logs, and the probes' [MASK] fills."""
    pcfg, tb_dir = cfg.pretrain, stage_dir / "tensorboard"
    probes = [t.replace(MASK_TOKEN, " ") for t in pcfg.probe_texts]
    loggers = tensorboard_callbacks(
        cfg.logger,
        tb_dir,
        preprocessor,
        probes,
        classify=False,
        label=f"masked LM {label}".strip(),
        log_initial=log_initial,
    )
    if cfg.logger.tensorboard and pcfg.probe_texts:
        loggers.append(
            FillMaskLogger(
                tb_dir,  # beside the stage's attention records: one TensorBoard run, not two
                preprocessor,
                list(pcfg.probe_texts),
            )
        )
    return loggers


def _float(value):
    return None if value in (None, "") else float(value)


def check_pretrained_source(cfg, vectorizer) -> dict:
    """For ``pretrain.from_run=SOURCE``: the source's pretraining summary, after checking that its encoder
    fits this run (same architecture, same vocabulary); a mismatch is a one-line ConfigError."""
    source = Path(cfg.pretrain.from_run)
    shown = f"pretrain.from_run={source}"
    config_file = source / ".hydra" / "config.yaml"
    if not config_file.is_file():
        raise ConfigError(f"{shown} is not a run directory (no .hydra/config.yaml)")
    if not (source / STAGE_DIR / MODEL_FILE).is_file():
        raise ConfigError(
            f"{shown} has no finished masked-LM stage (no {STAGE_DIR}/{MODEL_FILE}); "
            "pretrain one with: python scripts/train.py pretrain=mlm"
        )
    record = recorded(source)
    if record.get("format") != RUN_FORMAT:
        raise ConfigError(f"pretrain.from_run: {other_format(source, record.get('format'))}")
    theirs = OmegaConf.load(config_file)
    for key in ARCHITECTURE_KEYS:
        there, here = theirs.model[key], cfg.model[key]
        if there != here:
            raise ConfigError(
                f"{shown} has another encoder: model.{key}={typed(there)} there, {typed(here)} here; "
                "fine-tune with the architecture it was pretrained with"
            )
    if (theirs.model.pooling == "cls") != (cfg.model.pooling == "cls"):
        raise ConfigError(
            f"{shown} has another encoder: model.pooling={theirs.model.pooling} there, {cfg.model.pooling} here "
            "(a [CLS] position exists only with pooling=cls)"
        )
    their_vocab = read_vocabulary(source / "vocab.txt")
    our_vocab = vectorizer.get_vocabulary(include_special_tokens=False)
    if their_vocab != our_vocab:
        first = next((i for i, (a, b) in enumerate(zip(their_vocab, our_vocab)) if a != b), None)
        where = (
            ""
            if first is None
            else f"; first difference at id {first + 2}: {their_vocab[first]!r} vs {our_vocab[first]!r}"
        )
        raise ConfigError(
            f"{shown} has another vocabulary: {len(their_vocab) + 2} tokens from data={theirs.data.name} there, "
            f"{len(our_vocab) + 2} from data={cfg.data.name} here{where}; fine-tune on the data it was pretrained on"
        )
    summary = dict(record["results"].get("pretrain") or {"objective": "mlm"})
    summary["from"] = str(source)
    return summary


class Perplexity(keras.callbacks.Callback):
    """Adds ``perplexity = exp(masked-LM loss)`` to the epoch logs of a pretraining stage (the loss is the
    mean cross-entropy over masked tokens: ``loss`` for mlm, ``masked_lm_loss``, the generator's, for
    electra), so CSVLogger and TensorBoard record it beside the loss."""

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("masked_lm_loss", (logs or {}).get("loss"))
        if loss is not None:
            logs["perplexity"] = perplexity(float(loss))


class FillMaskLogger(keras.callbacks.Callback):
    """Every epoch, the masked LM's top-5 words for each ``[MASK]`` of a few probe sentences, as
    TensorBoard text (``fill_mask/{k}``): watch the model learn the language."""

    def __init__(self, log_dir, preprocessor, texts, top_k: int = 5):
        super().__init__()

        self.writer = tf.summary.create_file_writer(str(Path(log_dir)))
        self.preprocessor = preprocessor
        self.texts = list(texts)
        self.top_k = top_k

    def on_epoch_end(self, epoch, logs=None):
        with self.writer.as_default(step=epoch + 1):  # the epoch scalars' step (EpochTensorBoard)
            for k, text in enumerate(self.texts):
                filled = fill_mask(self.model, self.preprocessor, text, self.top_k)
                lines = [
                    f"[MASK] {i + 1}: " + ", ".join(f"{word} ({p:.2f})" for word, p in words)
                    for i, words in enumerate(filled)
                ]
                tf.summary.text(f"fill_mask/{k}", f"**text:** {text}  \n" + "  \n".join(lines))
        self.writer.flush()
