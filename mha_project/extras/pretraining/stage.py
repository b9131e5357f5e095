"""The pretraining stage (``PretrainingStage``, the ``_target_`` of the ``pretrain:`` node, which ``train`` calls
before the classifier is built): a masked-LM or ELECTRA stage on the training texts, or another run's pretrained
backbone (``pretrain.from_run``); the classifier starts from its backbone."""

from __future__ import annotations

import logging
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from omegaconf import OmegaConf

from mha_project.data.texts import concat_texts, select_texts
from mha_project.data.vocabulary import read_vocabulary
from mha_project.errors import ConfigError, RunDirRefused, UserError, typed
from mha_project.extras.analysis.runs import load_model
from mha_project.extras.pretraining.fill_mask import fill_mask, perplexity
from mha_project.extras.pretraining.masking import MASK_TOKEN, mask_id_of, masked_lm_dataset
from mha_project.extras.pretraining.models import build_pretrainer
from mha_project.run_dir import MODEL_FILE, RUN_FORMAT, STAGE_DIR, other_format, read_record
from mha_project.training.callbacks import tensorboard_callbacks
from mha_project.training.fit import fit_resumably, read_history
from mha_project.training.schedules import warmup_cosine
from mha_project.training.train import run_label, save_model_atomic

log = logging.getLogger(__name__)


# The backbone arguments a pretrained run must share with the run that fine-tunes its backbone: all but the
# vocabulary (checked word for word) and the dropout rates (the stage has its own).
ARCHITECTURE_KEYS = (
    "_target_",
    "cls_token",
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
    "local_conv",
)


class PretrainingStage:
    """``pretrain=mlm|electra``: the encoder pretrained on the training texts first (``objective``), the
    classifier then starting from its weights; ``pretrain.from_run``: another run's pretrained encoder instead;
    ``pretrain=none``: neither. Each argument is the ``pretrain.<name>`` key of the same name."""

    def __init__(
        self, objective: str, epochs: int, batch_size: int, lr: float, warmup_fraction: float, weight_decay: float,
        clipnorm: float, mask_rate: float, dropout: float, tie_embeddings: bool, extra_unlabeled: bool,
        probe_texts, from_run=None, generator_size=None, discriminator_weight=None,
    ):  # fmt: skip
        self.objective, self.epochs, self.batch_size, self.lr = objective, epochs, batch_size, lr
        self.warmup_fraction, self.weight_decay, self.clipnorm = warmup_fraction, weight_decay, clipnorm
        self.mask_rate, self.dropout, self.tie_embeddings = mask_rate, dropout, tie_embeddings
        self.extra_unlabeled, self.probe_texts, self.from_run = extra_unlabeled, list(probe_texts), from_run
        self.generator_size, self.discriminator_weight = generator_size, discriminator_weight

    def __call__(self, cfg, data, splits, preprocessor, record, strategy):
        """Run the stage (recorded as ``pretrained``; a resumed run after it skips it) and return the pretrained
        backbone with fine-tuning's dropout; None for a run without pretraining."""
        if self.objective == "none" and not self.from_run:
            return None
        if not record.done("pretrained"):
            summary = check_pretrained_source(cfg, preprocessor.vectorizer) if self.from_run else None
            if self.objective != "none":
                texts = splits.train_texts  # the training split only: never validation or test
                if self.extra_unlabeled:
                    unlabeled = data.unlabeled()
                    if data.limit is not None:
                        unlabeled = select_texts(unlabeled, range(min(data.limit, len(unlabeled))))
                    log.info(f"pretraining also on {len(unlabeled)} unlabeled texts")
                    texts = concat_texts(texts, unlabeled)
                summary = run_pretraining(self, cfg, data, record, preprocessor, texts)
            record.finish_stage("pretrained", pretrain=summary)
        saved = Path(self.from_run or record.path) / STAGE_DIR / MODEL_FILE
        pretrained = load_model(saved, cfg)
        # The classifier's own initial weights must not depend on whether the stage ran in this process (a resume
        # after it) or how much randomness it used; runs without it are untouched.
        keras.utils.set_random_seed(cfg.seed)
        log.info(f"backbone initialised from {saved}")
        return pretrained_backbone(pretrained, cfg.model.backbone)


def pretrained_backbone(pretrainer, backbone_cfg):
    """The classifier's backbone: the pretrained one's shape and weights, with fine-tuning's dropout."""
    return pretrainer.backbone.clone(dropout=backbone_cfg.dropout, attention_dropout=backbone_cfg.attention_dropout)


def run_pretraining(pcfg: PretrainingStage, cfg, data, record, preprocessor, texts) -> dict:
    """Train the masked LM on ``texts`` in the run's ``pretrain/`` (resumed as ``record`` resumes a fit); save it;
    return its summary."""
    stage_dir = record.path / STAGE_DIR
    stage_dir.mkdir(parents=True, exist_ok=True)
    mask_id = mask_id_of(preprocessor.vectorizer)
    labels = np.zeros(len(texts), "int32")
    batches = data.pipeline(texts, labels, preprocessor, int(pcfg.batch_size), cfg.seed, shuffle=True)
    dataset = masked_lm_dataset(batches, rate=float(pcfg.mask_rate), mask_id=mask_id, seed=int(cfg.seed))
    steps_per_epoch = int(dataset.cardinality())
    log.info(
        f"pretraining: {pcfg.objective} on {len(texts)} training texts · {pcfg.epochs} epoch(s) of "
        f"{steps_per_epoch} batches · mask rate {pcfg.mask_rate} · tied embeddings {pcfg.tie_embeddings}"
    )
    model = build_pretrainer(cfg.model.backbone, pcfg, preprocessor.vectorizer.vocabulary_size())
    _compile_pretrainer(model, pcfg, steps_per_epoch)

    previous = record.previous_epochs(stage_dir)
    after_csv = _stage_loggers(pcfg, cfg, stage_dir, preprocessor, log_initial=not previous)
    fit = fit_resumably(
        model,
        dataset,
        stage_dir,
        previous,
        record.backup(stage_dir),
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


def _stage_loggers(pcfg: PretrainingStage, cfg, stage_dir: Path, preprocessor, log_initial: bool) -> list:
    """The stage's TensorBoard records: what every fit logs, and the probes' [MASK] fills."""
    tb_dir = stage_dir / "tensorboard"
    probes = [t.replace(MASK_TOKEN, " ") for t in pcfg.probe_texts]
    loggers = tensorboard_callbacks(
        cfg.logger,
        tb_dir,
        preprocessor,
        probes,
        classify=False,
        label=f"masked LM {run_label(stage_dir.parent)}".strip(),
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
    try:
        record = read_record(source) or {}
    except RunDirRefused as err:
        raise ConfigError(f"pretrain.from_run: {err}") from None
    if record.get("format") != RUN_FORMAT:
        raise ConfigError(f"pretrain.from_run: {other_format(source, record.get('format'))}")
    theirs = OmegaConf.load(config_file)
    for key in ARCHITECTURE_KEYS:
        there, here = theirs.model.backbone[key], cfg.model.backbone[key]
        if there != here:
            raise ConfigError(
                f"{shown} has another encoder: model.backbone.{key}={typed(there)} there, {typed(here)} here; "
                "fine-tune with the architecture it was pretrained with"
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
