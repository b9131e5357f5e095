"""The typed configuration: a dataclass per config group, stored in Hydra's ConfigStore when this module is
imported, and each field's range check beside it.

A group's YAML names its dataclass first in its defaults list (``configs/data/fine_foods.yaml``:
``- data_schema``), so a value of the wrong type (``heads=abc``) is refused by Hydra while composing, and a
composed node remembers its dataclass (``OmegaConf.get_type``): :func:`validate_config` finds every node's
checks there, an extra's too, with no list to register them in. It runs before TensorFlow loads (Hydra's
callback, ``training/hydra_callbacks.py``), so a bad command line is answered in about a second.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import os
import re
import string
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict
from omegaconf.errors import InterpolationResolutionError

from mha_project.errors import ConfigError, UserError, causes, typed

# The command-line shortcuts (`python scripts/train.py heads=8`) and the keys each one sets through the
# interpolations in configs/ (`num_heads: ${heads}`): the name a check says when one of those keys is bad.
SHORTCUTS = {
    "heads": ("model.backbone.num_heads",),
    "key_dim": ("model.backbone.key_dim",),
    "value_dim": ("model.backbone.value_dim",),
    "dropout": ("model.backbone.dropout", "model.dropout"),
    "layers": ("model.backbone.num_layers",),
    "embed_dim": ("model.backbone.embed_dim",),
    "ff_dim": ("model.backbone.ff_dim",),
    "seq_len": ("data.seq_len", "model.backbone.max_len"),
    "epochs": ("trainer.epochs",),
    "batch_size": ("trainer.batch_size",),
    "lr": ("trainer.lr",),
}
TRUNCATIONS = ("head", "tail", "head_tail")  # data.truncation (data/pipeline.py)
EMBEDDING_NORMS = ("layer_norm", "sqrt_dim", "none")  # model.backbone.embedding_norm
POOLINGS = ("mean", "mean_max", "cls", "last")  # model.pooling
MONITORS = ("val_accuracy", "val_loss")  # trainer.monitor: what picks the best epoch (accuracy up, loss down)
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
BACKENDS = ("tensorflow", "jax")  # Keras backends this project trains on


def positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def optional(ok):
    return lambda v: v is None or ok(v)


def checked(ok, allowed: str):
    """A field whose value :func:`validate_config` checks: ``ok(value)`` must hold; ``allowed`` says what may
    stand there. Its value lives in configs/ (one place): a key missing there is an error, not a default."""
    return field(default=MISSING, metadata={"ok": ok, "allowed": allowed})


def one_of(names) -> str:
    return "one of " + ", ".join(names)


@dataclass
class TrainConfig:
    """The root: the shortcuts, the seed and where the run writes. Open to the groups (each typed by its own
    schema), the extras' among them."""

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
    seed: int = checked(lambda v: 0 <= v < 2**32, "an integer in [0, 4294967295]")
    deterministic: bool = MISSING
    optimized_metric: Optional[str] = MISSING  # the metric a sweeper (Optuna) optimises
    run_dir: str = MISSING  # where the run writes: Hydra's output dir (train(cfg, run_dir) outside Hydra)
    tags: Any = None  # free-form room for experiment configs; never read by the code


@dataclass
class DataConfig:
    """What every data source shares (``data/sources.py``: ``TextData``); a source's schema adds its own keys."""

    _target_: str = MISSING
    name: str = MISSING
    val_fraction: float = checked(lambda v: 0 < v < 1, "a number in (0, 1)")
    limit: Optional[int] = checked(optional(positive_int), "null or an integer >= 1")
    vocab_size: int = checked(lambda v: v >= 3, "an integer >= 3")
    vocab_sample: Optional[int] = checked(optional(positive_int), "null or an integer >= 1")
    seq_len: int = checked(positive_int, "an integer >= 1")
    truncation: str = checked(lambda v: v in TRUNCATIONS, one_of(TRUNCATIONS))
    bucketing: bool = MISSING
    bucket_width: Optional[int] = checked(optional(positive_int), "null or an integer >= 1")
    shuffle_buffer: Optional[int] = checked(optional(positive_int), "null or an integer >= 1")
    reserved_words: List[str] = MISSING  # words the vocabulary must hold (a masked LM's [MASK])


@dataclass
class BackboneConfig:
    """``EncoderBackbone``'s arguments (``model/backbone.py``), one name each from here to the constructor."""

    _target_: str = MISSING
    max_len: int = checked(positive_int, "an integer >= 1")
    embed_dim: int = checked(positive_int, "an integer >= 1")
    num_layers: int = checked(positive_int, "an integer >= 1")
    num_heads: int = checked(positive_int, "an integer >= 1")
    key_dim: int = checked(positive_int, "an integer >= 1")
    ff_dim: int = checked(positive_int, "an integer >= 1")
    value_dim: Optional[int] = checked(optional(positive_int), "null or an integer >= 1")
    dropout: float = checked(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
    attention_dropout: Optional[float] = checked(optional(lambda v: 0.0 <= v < 1.0), "null or a number in [0, 1)")
    activation: str = MISSING
    use_bias: bool = MISSING
    use_gate: bool = MISSING
    sliding_window: Optional[int] = checked(optional(positive_int), "null or an integer >= 1")
    norm_first: bool = MISSING
    causal: bool = MISSING
    embedding_norm: str = checked(lambda v: v in EMBEDDING_NORMS, one_of(EMBEDDING_NORMS))
    cls_token: bool = MISSING
    local_conv: int = checked(lambda v: v >= 0, "an integer >= 0 (0: none)")
    dtype: str = checked(lambda v: v in PRECISIONS, one_of(PRECISIONS))


@dataclass
class ClassifierConfig:
    """``TextClassifier``'s arguments (``model/classifier.py``) but the class count, which the data gives."""

    _target_: str = MISSING
    backbone: Optional[BackboneConfig] = MISSING
    pooling: str = checked(lambda v: v in POOLINGS, one_of(POOLINGS))
    dropout: float = checked(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")

    @staticmethod
    def check(model: DictConfig, cfg: DictConfig) -> None:
        backbone = model.backbone
        if backbone is None:
            raise ConfigError(
                f"model.backbone=null is invalid for {model._target_.rpartition('.')[2]}: it classifies what its "
                "backbone computes; only model=wide_deep trains without one (its bag of n-grams alone)"
            )
        if cfg.data.seq_len > backbone.max_len:
            raise ConfigError(
                f"data.seq_len={cfg.data.seq_len} is invalid: must be <= model.backbone.max_len={backbone.max_len} "
                "(the position table's length); set seq_len=N to change both"
            )
        if (model.pooling == "cls") != backbone.cls_token:
            raise ConfigError(
                f"model.pooling={model.pooling} is invalid with model.backbone.cls_token={typed(backbone.cls_token)}: "
                "pooling=cls reads the [CLS] position, which only cls_token=true adds"
            )
        if not cfg.data.bucketing:  # every batch pads to seq_len: the size is known before any data is read
            need = attention_memory_bytes(cfg.trainer.batch_size, backbone.num_heads, backbone.num_layers, cfg.seq_len)
            have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            if need > have:
                raise ConfigError(
                    f"seq_len={cfg.data.seq_len} is invalid with data.bucketing=false here: every batch pads to it, "
                    f"and attention alone would need about {need / 2**30:,.0f} GiB per step (batch_size="
                    f"{cfg.trainer.batch_size} x heads={backbone.num_heads} x seq_len^2 x layers="
                    f"{backbone.num_layers}) against this machine's {have / 2**30:,.0f} GiB: lower seq_len or "
                    "batch_size, or set data.bucketing=true"
                )


@dataclass
class AdamWConfig:
    """``keras.optimizers.AdamW``'s arguments; ``train`` gives it the learning-rate schedule (``_partial_``)."""

    _target_: str = MISSING
    _partial_: bool = MISSING
    weight_decay: float = checked(lambda v: v >= 0, "a number >= 0")
    clipnorm: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")


@dataclass
class TrainerConfig:
    epochs: int = checked(positive_int, "an integer >= 1")
    batch_size: int = checked(positive_int, "an integer >= 1")
    lr: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    warmup_fraction: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    early_stopping_patience: int = checked(lambda v: v >= 0, "an integer >= 0")
    monitor: str = checked(lambda v: v in MONITORS, one_of(MONITORS))
    jit_compile: bool = MISSING
    steps_per_execution: int = checked(positive_int, "an integer >= 1")
    validations_per_epoch: int = checked(positive_int, "an integer >= 1")
    precision: str = checked(lambda v: v in PRECISIONS, one_of(PRECISIONS))
    strategy: Any = MISSING  # a `_target_` node: the devices the run trains on (null: this process's default)
    schedule_from_data: Any = MISSING  # a `_target_` node: settings the training split decides (null: none)


@dataclass
class AttentionLogConfig:
    every_n_epochs: int = checked(lambda v: v >= 0, "an integer >= 0 (0 disables)")
    num_probes: int = checked(lambda v: v >= 0, "an integer >= 0")
    probe_texts: List[str] = MISSING
    max_tokens: int = checked(positive_int, "an integer >= 1")

    @staticmethod
    def check(attention: DictConfig, cfg: DictConfig) -> None:
        for text in attention.probe_texts:
            if not re.sub(f"[{re.escape(string.punctuation)}]", " ", str(text)).split():
                raise ConfigError(
                    f"logger.attention.probe_texts has {text!r}, which has no words after lower-casing and "
                    "removing punctuation (as TextVectorization does): give probes with words"
                )


@dataclass
class LoggerConfig:
    tensorboard: bool = MISSING
    attention: AttentionLogConfig = field(default_factory=AttentionLogConfig)
    overfit_hint: bool = MISSING  # the last line says when validation loss rose after its lowest epoch
    profile_batches: List[int] = checked(
        lambda v: len(v) == 0 or (len(v) == 2 and 1 <= v[0] <= v[1]), "[] or [start, stop] with 1 <= start <= stop"
    )


def store(name: str, node: type, at: str) -> None:
    """Put a schema in Hydra's ConfigStore, in the ``schema`` group (out of the option lists a user chooses from),
    with the package its node lands at (``at``); a group's YAML names it first: ``- /schema/<name>@_here_``. An
    extra's ``config.py`` calls this too."""
    ConfigStore.instance().store(group="schema", name=name, node=node, package=at, provider="mha_project")


# `${eq:${..pooling},cls}` (configs/model/backbone/encoder.yaml): a value that follows another key's.
OmegaConf.register_new_resolver("eq", lambda a, b: a == b, replace=True)

root = OmegaConf.structured(TrainConfig)
OmegaConf.set_struct(root, False)  # the groups join it; Hydra makes the composed config strict again
ConfigStore.instance().store(name="train_schema", node=root, provider="mha_project")
store("data_schema", DataConfig, at="data")
store("classifier_schema", ClassifierConfig, at="model")
store("backbone_schema", BackboneConfig, at="model.backbone")
store("adamw_schema", AdamWConfig, at="optimizer")
store("trainer_schema", TrainerConfig, at="trainer")
store("logger_schema", LoggerConfig, at="logger")


def build(node, *args, **kwargs):
    """``hydra.utils.instantiate(node, ...)``: the part a config node describes. A part that refuses its arguments
    with a UserError (a one-line answer) raises it as it is, not inside Hydra's InstantiationException."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, *args, **kwargs)
    except InstantiationException as err:
        refused = next((cause for cause in causes(err) if isinstance(cause, UserError)), None)
        if refused is None:
            raise
        raise refused from None


def keras_backend() -> str:
    """The Keras backend this process runs on: ``KERAS_BACKEND``, Keras's own default when unset."""
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def attention_memory_bytes(batch_size: int, num_heads: int, num_layers: int, length: int) -> int:
    """About what one training step's attention needs at ``length`` tokens: per layer the scores, the
    probabilities and their gradient, ``batch x heads x length^2`` float32 values each."""
    return 3 * num_layers * batch_size * num_heads * length * length * 4


def validate_config(cfg: DictConfig) -> None:
    """Raise a one-line ConfigError for the first key that is no setting or whose value is out of range. Each
    typed node is checked by its dataclass: its fields' checks, then its ``check(node, cfg)`` if it has one.
    Touches no file and imports no TensorFlow."""
    try:
        _ = cfg.run_dir  # Hydra's output dir, set once a job starts; unset (composed for a check): not checked
    except InterpolationResolutionError:
        cfg = cfg.copy()
        with open_dict(cfg):
            cfg.run_dir = ""
    try:  # reading a value resolves it; a resolver that refuses a value raises ConfigError inside OmegaConf's
        for key in cfg:
            if key != "hydra":  # Hydra's own node resolves per job, later
                value = cfg[key]
                if OmegaConf.is_config(value):
                    OmegaConf.to_container(value, resolve=True)
    except InterpolationResolutionError as err:
        refused = next((cause for cause in causes(err) if isinstance(cause, ConfigError)), None)
        if refused is None:
            raise
        raise refused from None
    backend = keras_backend()
    if backend not in BACKENDS:
        raise ConfigError(
            f"KERAS_BACKEND={backend} is invalid: this project trains on KERAS_BACKEND=tensorflow (the default) or "
            'KERAS_BACKEND=jax (pip install -e ".[jax]")'
        )
    if importlib.util.find_spec(backend) is None:
        raise ConfigError(f'KERAS_BACKEND={backend} is not installed here: pip install -e ".[{backend}]"')
    for key, node, schema in typed_nodes(cfg):
        _check_node(key, node, schema, cfg)


def typed_nodes(cfg: DictConfig, prefix: str = ""):
    """``(dotted key, node, dataclass)`` of every node a schema types, outermost first."""
    schema = OmegaConf.get_type(cfg)
    if dataclasses.is_dataclass(schema):
        yield prefix, cfg, schema
    for key in cfg:
        if key == "hydra" and not prefix:
            continue
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none():
            yield from typed_nodes(child, f"{prefix}{key}.")


def _check_node(prefix: str, node: DictConfig, schema: type, cfg: DictConfig) -> None:
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for key in node:
        untyped_group = not prefix and isinstance(node._get_node(key), DictConfig)  # the root takes the groups
        if key not in fields and not untyped_group and not (key == "hydra" and not prefix):
            raise ConfigError(not_a_setting(f"{prefix}{key}"))
    for name, f in fields.items():
        ok = f.metadata.get("ok")
        if ok is None or name not in node:
            continue
        value = node[name]
        try:
            good = ok(value)
        except TypeError:
            good = False
        if not good:
            key = f"{prefix}{name}"
            raw = node._get_node(name)._value()  # `${heads}`: the key a user typed is the one it follows
            typed_as = re.fullmatch(r"\$\{([\w.]+)\}", raw) if isinstance(raw, str) else None
            shown = typed_as.group(1) if typed_as else key
            where = "" if shown == key else f" ({key})"
            raise ConfigError(f"{shown}={typed(value)}{where} is invalid: must be {f.metadata['allowed']}")
    if hasattr(schema, "check"):  # the dataclass's own check across its fields
        schema.check(node, cfg)


def setting_owners() -> dict[str, set[str]]:
    """Every dotted key of the ConfigStore's schemas, with the schemas that have it (a shortcut's: none)."""
    owners: dict[str, set[str]] = {name: set() for name in [*SHORTCUTS, "seed", "deterministic"]}

    def walk(node, prefix, schema):
        for key in node:
            child = node._get_node(key)
            if isinstance(child, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(child)):
                walk(child, f"{prefix}{key}.", schema)
            elif not key.startswith("_") and key != "tags":
                owners.setdefault(f"{prefix}{key}", set()).add(schema)

    for name, entry in ConfigStore.instance().repo.get("schema", {}).items():
        walk(entry.node, f"{entry.package}.", name.removesuffix(".yaml").removesuffix("_schema"))
    return owners


def not_a_setting(key: str) -> str:
    """The one line for a key that is no setting of the options chosen: the part that has it where one does
    (``model.ngram_branch.c`` without a linear bag), else the closest settings, never Hydra's ``+key``."""
    settings, see = setting_owners(), "`python scripts/train.py --help` lists the settings"
    if settings.get(key):
        part = f"{' and '.join(sorted(settings[key]))} ({key.rsplit('.', 1)[0]})"
        return f"{key} is not a setting of the options chosen: it belongs to {part}, which they do not include; {see}"
    close = difflib.get_close_matches(key, sorted(settings), n=2, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"{key} is not a setting of this project; {hint}{see}"


# The groups whose choice says what was trained (the others wrap the job: logging, records, reports).
CHOSEN_PARTS = ("data", "model", "optimizer", "loss", "trainer", "pretrain", "experiment", "debug", "hparams_search")


def hparams_of(cfg: DictConfig, choices=None) -> dict:
    """The hyper-parameters a run trained with, by the names a user types (``heads``, ``key_dim``, every other
    model option by its own name, a part built from a node of its own by its class and its options, e.g.
    ``ngram_branch: NaiveBayesNgrams``, ``ngram_branch.c``), the optimizer's options, the data and seed that tell
    runs apart, and the config groups chosen (Hydra's ``runtime.choices``: ``pretrain: mlm``); no nulls."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    values = {**(model.pop("backbone", None) or {}), **model}
    for key, node in list(values.items()):
        if isinstance(node, dict):  # a part of the model built from a node of its own (a bag of n-grams)
            values[key] = str(node.get("_target_", "")).rpartition(".")[2]
            values |= {f"{key}.{k}": v for k, v in node.items() if not isinstance(v, dict)}
    optimizer = OmegaConf.to_container(cfg.optimizer, resolve=True) if "optimizer" in cfg else {}
    values |= {f"optimizer.{k}": v for k, v in optimizer.items() if not isinstance(v, dict)}
    values |= {name: OmegaConf.select(cfg, keys[0]) for name, keys in SHORTCUTS.items()}
    values |= {"truncation": cfg.data.truncation, "dataset": cfg.data.name, "seed": cfg.seed}
    values |= {g: o for g, o in (choices or {}).items() if g.split("/")[0] in CHOSEN_PARTS and o is not None}
    if values.get("value_dim") is None:
        values["value_dim"] = values["key_dim"]
    return {k: v for k, v in values.items() if v is not None and "_" != k.rpartition(".")[2][:1]}
