"""Typed configuration schema and the checks a schema cannot express.

The dataclasses are registered with Hydra's ConfigStore as ``train_schema`` (the first entry of
``configs/train.yaml``'s defaults list), so a value of the wrong type (``heads=abc``) is refused by
Hydra before anything runs. Each field's range check stands beside it (``checked(...)``);
:func:`validate_config` runs them, then the checks that span several keys or the file system, and raises
:class:`ConfigError` with one line naming the key, the value and what is allowed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from mha_project.data import TRUNCATIONS
from mha_project.data.folders import check_folder_dataset
from mha_project.errors import ConfigError
from mha_project.model import INPUT_SCALES, NGRAM_BRANCHES, OBJECTIVES, POOLINGS, POSITION_ENCODINGS

DATASETS = ("fine_foods", "imdb", "ag_news", "folder")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
DISTRIBUTIONS = ("none", "mirrored", "data_parallel", "multi_worker")
# Why trainer.distribution=multi_worker is refused (mha_project/training/distribute.py has the details).
MULTI_WORKER_UNSUPPORTED = (
    "trainer.distribution=multi_worker is not supported: Keras 3's model.fit fails under "
    "tf.distribute.MultiWorkerMirroredStrategy (keras-team/keras#20585); use trainer.distribution=data_parallel "
    "with KERAS_BACKEND=jax (keras.distribution), on one machine or several"
)
UNLABELED_DATASETS = ("imdb", "folder")  # datasets with an unlabeled split (pretrain.extra_unlabeled)


# The command-line shortcuts (`python scripts/train.py heads=8`) and the keys each one sets, through the
# interpolations in configs/ (`model.num_heads: ${heads}`). The one list: the schema's fields, the HParams
# names and the README's list are checked against it (tests/test_config.py).
SHORTCUTS = {
    "heads": ("model.num_heads",),
    "key_dim": ("model.key_dim",),
    "value_dim": ("model.value_dim",),
    "dropout": ("model.dropout",),
    "layers": ("model.num_layers",),
    "embed_dim": ("model.embed_dim",),
    "ff_dim": ("model.ff_dim",),
    "seq_len": ("data.seq_len", "model.max_len"),
    "epochs": ("trainer.epochs",),
    "batch_size": ("trainer.batch_size",),
    "lr": ("trainer.lr",),
}


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _positive_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def checked(ok, allowed: str, shown: str | None = None):
    """A schema field whose value :func:`validate_config` checks: ``ok(value)`` must hold, ``allowed`` says
    what may stand there, ``shown`` is the name a user types (default: the shortcut that sets the key, else
    the key)."""
    return field(default=MISSING, metadata={"ok": ok, "allowed": allowed, "shown": shown})


# The schema holds types only: every value lives in configs/ (one place), and a key missing there is an
# error (MISSING) rather than a silent second default.
@dataclass
class DataConfig:
    name: str = checked(lambda v: v in DATASETS, "one of " + ", ".join(DATASETS), shown="data")
    tfds_name: Optional[str] = MISSING
    path: Optional[str] = MISSING
    data_dir: Optional[str] = MISSING
    download: bool = MISSING
    val_fraction: float = checked(lambda v: 0 < v < 1, "a number in (0, 1)")
    limit: Optional[int] = checked(lambda v: v is None or _positive_int(v), "null or an integer >= 1")
    vocab_size: int = checked(lambda v: isinstance(v, int) and v >= 3, "an integer >= 3")
    vocab_sample: Optional[int] = checked(lambda v: v is None or _positive_int(v), "null or an integer >= 1")
    seq_len: int = checked(_positive_int, "an integer >= 1")
    truncation: str = checked(lambda v: v in TRUNCATIONS, "one of " + ", ".join(TRUNCATIONS))
    bucketing: bool = MISSING
    bucket_width: Optional[int] = checked(lambda v: v is None or _positive_int(v), "null or an integer >= 1")
    shuffle_buffer: Optional[int] = checked(lambda v: v is None or _positive_int(v), "null or an integer >= 1")


@dataclass
class ModelConfig:
    num_heads: int = checked(_positive_int, "an integer >= 1")
    key_dim: int = checked(_positive_int, "an integer >= 1")
    value_dim: Optional[int] = checked(lambda v: v is None or _positive_int(v), "null or an integer >= 1")
    dropout: float = checked(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
    attention_dropout: Optional[float] = checked(lambda v: v is None or 0.0 <= v < 1.0, "null or a number in [0, 1)")
    num_layers: int = checked(_positive_int, "an integer >= 1")
    embed_dim: int = checked(_positive_int, "an integer >= 1")
    ff_dim: int = checked(_positive_int, "an integer >= 1")
    max_len: int = checked(_positive_int, "an integer >= 1")
    activation: str = MISSING
    use_bias: bool = MISSING
    norm_first: bool = MISSING
    pooling: str = checked(lambda v: v in POOLINGS, "one of " + ", ".join(POOLINGS))
    embedding_norm: str = checked(lambda v: v in INPUT_SCALES, "one of " + ", ".join(INPUT_SCALES))
    position_encoding: str = checked(lambda v: v in POSITION_ENCODINGS, "one of " + ", ".join(POSITION_ENCODINGS))
    ngram_branch: str = checked(lambda v: v in NGRAM_BRANCHES, "one of " + ", ".join(NGRAM_BRANCHES))
    ngram_buckets: int = checked(_positive_int, "an integer >= 1")
    ngram_dim: int = checked(_positive_int, "an integer >= 1")
    encoder_logit_dropout: float = checked(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
    local_conv: int = checked(lambda v: _int(v) and v >= 0, "an integer >= 0 (0: none)")


@dataclass
class TrainerConfig:
    epochs: int = checked(_positive_int, "an integer >= 1")
    batch_size: int = checked(_positive_int, "an integer >= 1")
    lr: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    weight_decay: float = checked(lambda v: v >= 0, "a number >= 0")
    clipnorm: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    warmup_fraction: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    early_stopping_patience: int = checked(lambda v: v >= 0, "an integer >= 0")
    jit_compile: bool = MISSING
    steps_per_execution: int = checked(_positive_int, "an integer >= 1")
    validations_per_epoch: int = checked(_positive_int, "an integer >= 1")
    precision: str = checked(lambda v: v in PRECISIONS, "one of " + ", ".join(PRECISIONS))
    distribution: str = checked(lambda v: v in DISTRIBUTIONS, "one of " + ", ".join(DISTRIBUTIONS))
    join_timeout: int = checked(_positive_int, "an integer >= 1 (seconds)")
    cpu_devices: Optional[int] = checked(lambda v: v is None or _positive_int(v), "null or an integer >= 1")
    ngram_lr: Optional[float] = checked(lambda v: v is None or (math.isfinite(v) and v > 0), "null or a number > 0")


@dataclass
class AttentionLogConfig:
    every_n_epochs: int = checked(lambda v: v >= 0, "an integer >= 0 (0 disables)")
    num_probes: int = checked(lambda v: _int(v) and v >= 0, "an integer >= 0")
    probe_texts: List[str] = MISSING
    max_tokens: int = checked(_positive_int, "an integer >= 1")
    html: bool = MISSING


@dataclass
class LoggerConfig:
    tensorboard: bool = MISSING
    attention: AttentionLogConfig = field(default_factory=AttentionLogConfig)
    hparams: bool = MISSING
    profile_batches: List[int] = checked(
        lambda v: len(v) == 0 or (len(v) == 2 and 1 <= v[0] <= v[1]), "[] or [start, stop] with 1 <= start <= stop"
    )


@dataclass
class PretrainConfig:
    objective: str = checked(lambda v: v in OBJECTIVES, "one of " + ", ".join(OBJECTIVES), shown="pretrain")
    epochs: int = checked(_positive_int, "an integer >= 1")
    batch_size: int = checked(_positive_int, "an integer >= 1")
    lr: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    warmup_fraction: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    weight_decay: float = checked(lambda v: v >= 0, "a number >= 0")
    clipnorm: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    mask_rate: float = checked(lambda v: 0 < v < 1, "a number in (0, 1)")
    dropout: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    tie_embeddings: bool = MISSING
    extra_unlabeled: bool = MISSING
    from_run: Optional[str] = checked(lambda v: v is None or v != "", "null or a run directory")
    probe_texts: List[str] = MISSING
    generator_size: Optional[float] = checked(lambda v: v is None or 0 < v <= 1, "a number in (0, 1]")
    discriminator_weight: Optional[float] = checked(lambda v: v is None or v > 0, "a number > 0")


@dataclass
class TrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    heads: int = MISSING
    key_dim: int = MISSING
    value_dim: Optional[int] = MISSING
    dropout: float = MISSING
    layers: int = MISSING
    embed_dim: int = MISSING
    ff_dim: int = MISSING
    seq_len: int = MISSING
    epochs: int = MISSING
    batch_size: int = MISSING
    lr: float = MISSING
    seed: int = checked(lambda v: _int(v) and 0 <= v < 2**32, "an integer in [0, 4294967295]")
    deterministic: bool = MISSING
    overwrite: bool = MISSING
    export: bool = MISSING
    optimized_metric: Optional[str] = MISSING
    # Free-form room for experiment configs (notes, tags); never read by the code.
    tags: Any = None


def register_configs() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


def validate_config(cfg: DictConfig) -> None:
    """Raise ConfigError for the first value that is out of range. Touches no file."""
    unknown = unknown_keys(cfg, TrainConfig)
    if unknown:
        raise ConfigError(not_a_setting(unknown[0]))
    _check_backend()
    if OmegaConf.is_missing(cfg.data, "path") and cfg.data.name == "folder":
        raise ConfigError("data=folder needs data.path=DIR (DIR/train/<class>/*.txt and DIR/test/<class>/*.txt)")
    for key, shown, ok, allowed in field_checks(TrainConfig):
        value = OmegaConf.select(cfg, key)
        try:
            good = ok(value)
        except TypeError:
            good = False
        if not good:
            where = "" if shown == key else f" ({key})"
            raise ConfigError(f"{shown}={_fmt(value)}{where} is invalid: must be {allowed}")
    if cfg.model.position_encoding == "rotary" and cfg.model.key_dim % 2:
        raise ConfigError(
            f"key_dim={cfg.model.key_dim} is invalid with model.position_encoding=rotary: rotary positions rotate "
            "pairs of query/key features, so key_dim must be even"
        )
    _check_attention_memory(cfg)
    _check_ngram_memory(cfg)
    if cfg.model.ngram_branch == "bigram_alone" and (cfg.pretrain.objective != "none" or cfg.pretrain.from_run):
        raise ConfigError(
            "model.ngram_branch=bigram_alone is invalid with pretraining: a bag of n-grams alone has no encoder "
            "to pretrain; use model.ngram_branch=bigram (the bag beside the encoder)"
        )
    if cfg.trainer.ngram_lr is not None and cfg.model.ngram_branch == "none":
        raise ConfigError(
            f"trainer.ngram_lr={cfg.trainer.ngram_lr} is invalid with model.ngram_branch=none: it is the n-gram "
            "branch's learning rate; add model.ngram_branch=bigram or leave trainer.ngram_lr=null"
        )
    if cfg.trainer.distribution == "multi_worker":
        raise ConfigError(MULTI_WORKER_UNSUPPORTED)
    if cfg.trainer.distribution == "data_parallel":
        _check_data_parallel(cfg)
    _check_pretrain(cfg)
    for text in cfg.logger.attention.probe_texts:
        if not _has_words(text):
            raise ConfigError(
                f"logger.attention.probe_texts has {text!r}, which has no words after lower-casing and "
                "removing punctuation (as TextVectorization does): give probes with words"
            )
    if cfg.data.seq_len > cfg.model.max_len:
        raise ConfigError(
            f"data.seq_len={cfg.data.seq_len} is invalid: must be <= model.max_len={cfg.model.max_len} "
            "(the position table's length); set seq_len=N to change both"
        )
    if cfg.data.name == "folder":
        path = cfg.data.path
        if not path:
            raise ConfigError("data=folder needs data.path=DIR (DIR/train/<class>/*.txt and DIR/test/<class>/*.txt)")
        if not os.path.isdir(path):
            raise ConfigError(f"data.path={path} does not exist or is not a directory")
        missing = [s for s in ("train", "test") if not os.path.isdir(os.path.join(path, s))]
        if missing:
            raise ConfigError(
                f"data.path={path} has no {' or '.join(s + '/' for s in missing)} folder: "
                "expected DIR/train/<class>/*.txt and DIR/test/<class>/*.txt"
            )
        check_folder_dataset(path)


def attention_memory_bytes(batch_size: int, num_heads: int, num_layers: int, length: int) -> int:
    """About what one training step's attention needs at ``length`` tokens: per layer the scores, the
    probabilities and their gradient, ``batch x heads x length^2`` float32 values each."""
    return 3 * num_layers * batch_size * num_heads * length * length * 4


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_ngram_memory(cfg: DictConfig) -> None:
    # The hashed-bigram table, its gradient and AdamW's two moments: float32, known before anything loads.
    if cfg.model.ngram_branch == "none":
        return
    need, have = 4 * 4 * cfg.model.ngram_buckets * cfg.model.ngram_dim, _memory_bytes()
    if need > have:
        raise ConfigError(
            f"model.ngram_buckets={cfg.model.ngram_buckets} is invalid here: its table (x model.ngram_dim="
            f"{cfg.model.ngram_dim}, with its gradient and optimizer state) would need about {need / 2**30:,.0f} GiB "
            f"against this machine's {have / 2**30:,.0f} GiB; lower model.ngram_buckets (default 262144)"
        )


BACKENDS = ("tensorflow", "jax")  # Keras backends this project trains on (README "Keras backends")


def _check_backend() -> None:
    import importlib.util

    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend not in BACKENDS:
        raise ConfigError(
            f"KERAS_BACKEND={backend} is invalid: this project trains on KERAS_BACKEND=tensorflow (the default) or "
            'KERAS_BACKEND=jax (pip install -e ".[jax]")'
        )
    if importlib.util.find_spec(backend) is None:
        raise ConfigError(f'KERAS_BACKEND={backend} is not installed here: pip install -e ".[{backend}]"')


def _check_attention_memory(cfg: DictConfig) -> None:
    # Without bucketing every batch pads to seq_len, so the size is known before any data is read.
    if cfg.data.bucketing:
        return
    need = attention_memory_bytes(cfg.trainer.batch_size, cfg.model.num_heads, cfg.model.num_layers, cfg.data.seq_len)
    have = _memory_bytes()
    if need > have:
        raise ConfigError(
            f"seq_len={cfg.data.seq_len} is invalid with data.bucketing=false here: every batch pads to it, and "
            f"attention alone would need about {need / 2**30:,.0f} GiB per step (batch_size={cfg.trainer.batch_size} "
            f"x heads={cfg.model.num_heads} x seq_len^2 x layers={cfg.model.num_layers}) against this machine's "
            f"{have / 2**30:,.0f} GiB: lower seq_len or batch_size, or set data.bucketing=true"
        )


def processes() -> int:
    """How many processes train together: Keras's ``KERAS_DISTRIBUTION_NUM_PROCESSES`` (keras.distribution)."""
    value = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"KERAS_DISTRIBUTION_NUM_PROCESSES={value} is invalid: must be an integer >= 1")
    return int(value)


def _check_data_parallel(cfg: DictConfig) -> None:
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend != "jax":
        raise ConfigError(
            f"trainer.distribution=data_parallel is invalid with KERAS_BACKEND={backend}: it is keras.distribution, "
            "which trains on the JAX backend; run KERAS_BACKEND=jax python scripts/train.py ..."
        )
    n = processes()
    if n == 1:
        return
    if not os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"):
        raise ConfigError(
            f"KERAS_DISTRIBUTION_NUM_PROCESSES={n} needs KERAS_DISTRIBUTION_JOB_ADDRESSES=HOST:PORT, the address of "
            'process 0, which coordinates (README "Multi-device")'
        )
    process_id = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "")
    if not (process_id.isascii() and process_id.isdigit() and int(process_id) < n):
        raise ConfigError(
            f"KERAS_DISTRIBUTION_PROCESS_ID={process_id} is invalid with KERAS_DISTRIBUTION_NUM_PROCESSES={n}: "
            f"must be one of 0..{n - 1}, a different one on each machine"
        )
    # Every process must step through batches of one shape at once, and the same number of them.
    if cfg.data.bucketing:
        raise ConfigError(
            f"data.bucketing=true is invalid with {n} processes: each process's length buckets would give it "
            "other batch shapes and counts than the others; set data.bucketing=false"
        )
    if cfg.trainer.batch_size % n:
        raise ConfigError(
            f"batch_size={cfg.trainer.batch_size} is invalid with {n} processes: the global batch is split evenly "
            f"between them, so it must be a multiple of {n}"
        )
    if cfg.pretrain.objective != "none":
        raise ConfigError(f"pretrain={cfg.pretrain.objective} is invalid with {n} processes: pretrain on one")


def _check_pretrain(cfg: DictConfig) -> None:
    pretrain = cfg.pretrain
    probes = pretrain.probe_texts

    def has_mask(text) -> bool:
        return isinstance(text, str) and "[mask]" in text.lower()

    if not OmegaConf.is_list(probes) or not all(has_mask(t) for t in probes):
        bad = probes if not OmegaConf.is_list(probes) else next(t for t in probes if not has_mask(t))
        raise ConfigError(
            f"pretrain.probe_texts has {bad!r}: each probe must be a sentence with [MASK] where a word goes"
        )
    if pretrain.extra_unlabeled and cfg.data.name not in UNLABELED_DATASETS:
        raise ConfigError(
            f"pretrain.extra_unlabeled=true is invalid with data={cfg.data.name}: it has no unlabeled texts; "
            "data=imdb (TFDS `unsupervised` split) and data=folder (train/unsup/) have"
        )
    if pretrain.extra_unlabeled and pretrain.objective == "none":
        raise ConfigError("pretrain.extra_unlabeled=true needs a pretraining stage: add pretrain=mlm")
    if pretrain.objective == "electra" and os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        raise ConfigError(
            f"pretrain=electra is invalid with KERAS_BACKEND={os.environ['KERAS_BACKEND']}: its train step "
            "(two losses and a sampling step) is written in TensorFlow; use pretrain=mlm there"
        )
    if pretrain.objective == "electra":
        for key, allowed in (("generator_size", "a number in (0, 1]"), ("discriminator_weight", "a number > 0")):
            if pretrain[key] is None:
                raise ConfigError(f"pretrain.{key}=null is invalid with pretrain=electra: must be {allowed}")
    source = pretrain.from_run
    if source is not None and pretrain.objective != "none":
        raise ConfigError(
            f"pretrain.from_run={source} reuses that run's pretrained backbone, so this run does not pretrain: "
            f"drop pretrain={pretrain.objective} (or pretrain.from_run)"
        )
    if source is not None and not os.path.isdir(source):
        raise ConfigError(f"pretrain.from_run={source} does not exist or is not a directory")


def field_checks(schema, prefix: str = "") -> list[tuple]:
    """(key, name a user types, check, what is allowed) of every checked field, nested dataclasses included."""
    import dataclasses

    out = []
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        if f.metadata.get("ok") is not None:
            shown = f.metadata["shown"] or next((name for name, keys in SHORTCUTS.items() if key in keys), key)
            out.append((key, shown, f.metadata["ok"], f.metadata["allowed"]))
        elif f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            out += field_checks(f.default_factory, f"{key}.")
    return out


def setting_names(schema=None, prefix: str = "") -> list[str]:
    """Every dotted key a command line may set (``heads``, ``model.num_heads``, ``logger.attention.html``)."""
    import dataclasses

    out = []
    for f in dataclasses.fields(schema or TrainConfig):
        key = f"{prefix}{f.name}"
        nested = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if nested is not None and dataclasses.is_dataclass(nested):
            out += setting_names(nested, f"{key}.")
        elif f.name != "tags":
            out.append(key)
    return out


def not_a_setting(key: str) -> str:
    """The one line for a key that is no setting: the closest settings there are, never Hydra's ``+key``."""
    import difflib

    close = difflib.get_close_matches(key, setting_names(), n=2, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"{key} is not a setting of this project; {hint}`python scripts/train.py --help` lists the settings"


def unknown_keys(cfg, schema, prefix: str = "") -> list[str]:
    """Dotted keys in ``cfg`` that the dataclass ``schema`` does not declare (``+foo=1`` adds such keys)."""
    import dataclasses

    declared = {f.name: f for f in dataclasses.fields(schema)}
    unknown = []
    for key in cfg.keys():
        if key == "hydra" and not prefix:
            continue  # Hydra's own node, present when a Hydra callback validates
        if key not in declared:
            unknown.append(f"{prefix}{key}")
            continue
        default = declared[key].default_factory if declared[key].default_factory is not dataclasses.MISSING else None
        if default is not None and dataclasses.is_dataclass(default) and isinstance(cfg[key], DictConfig):
            unknown += unknown_keys(cfg[key], default, f"{prefix}{key}.")
    return unknown


def _has_words(text: str) -> bool:
    """Whether Keras's default standardisation (lower case, strip ASCII punctuation) leaves a token."""
    import re
    import string

    return bool(re.sub(f"[{re.escape(string.punctuation)}]", " ", str(text)).split())


def _fmt(value) -> str:
    return "null" if value is None else str(value)
