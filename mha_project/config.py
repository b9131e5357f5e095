"""The typed configuration schema, the command-line shortcuts and each field's range check.

The dataclasses are registered with Hydra's ConfigStore as ``train_schema`` (the first entry of
``configs/train.yaml``'s defaults list), so a value of the wrong type (``heads=abc``) is refused by
Hydra before anything runs. Each field's range check stands beside it (``checked(...)``);
:func:`mha_project.checks.validate_config` runs them, then the checks that span several keys, the machine
or the file system.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

from mha_project.data import TRUNCATIONS
from mha_project.extending import DATA_SOURCES, SETTINGS
from mha_project.model import EMBEDDING_NORMS, POOLINGS, position_encodings

DATASETS = ("fine_foods",)  # configs/data/, data/sources.py; the extras add theirs (TFDS, folders, tables)
MONITORS = ("val_accuracy", "val_loss")  # trainer.monitor: what picks the best epoch (accuracy up, loss down)
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


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


def datasets() -> tuple[str, ...]:
    """Every ``data=`` name: the core's and the extras' (``mha_project/extending.py``)."""
    return (*DATASETS, *DATA_SOURCES)


def keras_backend() -> str:
    """The Keras backend this process runs on: ``KERAS_BACKEND``, Keras's own default when unset."""
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def positive_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def checked(ok, allowed: str, shown: str | None = None):
    """A schema field whose value :func:`validate_config` checks: ``ok(value)`` must hold, ``allowed`` says
    what may stand there, ``shown`` is the name a user types (default: the shortcut that sets the key, else
    the key); ``allowed`` may be a function that says it when asked."""
    return field(default=MISSING, metadata={"ok": ok, "allowed": allowed, "shown": shown})


# The schema holds types only: every value lives in configs/ (one place), and a key missing there is an
# error (MISSING) rather than a silent second default.
@dataclass
class DataConfig:
    name: str = checked(lambda v: v in datasets(), lambda: "one of " + ", ".join(datasets()), shown="data")
    val_fraction: float = checked(lambda v: 0 < v < 1, "a number in (0, 1)")
    limit: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")
    vocab_size: int = checked(lambda v: isinstance(v, int) and v >= 3, "an integer >= 3")
    vocab_sample: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")
    seq_len: int = checked(positive_int, "an integer >= 1")
    truncation: str = checked(lambda v: v in TRUNCATIONS, "one of " + ", ".join(TRUNCATIONS))
    bucketing: bool = MISSING
    bucket_width: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")
    shuffle_buffer: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")


@dataclass
class ModelConfig:
    num_heads: int = checked(positive_int, "an integer >= 1")
    key_dim: int = checked(positive_int, "an integer >= 1")
    value_dim: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")
    dropout: float = checked(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
    attention_dropout: Optional[float] = checked(lambda v: v is None or 0.0 <= v < 1.0, "null or a number in [0, 1)")
    num_layers: int = checked(positive_int, "an integer >= 1")
    embed_dim: int = checked(positive_int, "an integer >= 1")
    ff_dim: int = checked(positive_int, "an integer >= 1")
    max_len: int = checked(positive_int, "an integer >= 1")
    activation: str = MISSING
    use_bias: bool = MISSING
    use_gate: bool = MISSING
    sliding_window: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")
    norm_first: bool = MISSING
    pooling: str = checked(lambda v: v in POOLINGS, "one of " + ", ".join(POOLINGS))
    embedding_norm: str = checked(lambda v: v in EMBEDDING_NORMS, "one of " + ", ".join(EMBEDDING_NORMS))
    position_encoding: str = checked(
        lambda v: v in position_encodings(), lambda: "one of " + ", ".join(position_encodings())
    )
    local_conv: int = checked(lambda v: is_int(v) and v >= 0, "an integer >= 0 (0: none)")


@dataclass
class TrainerConfig:
    epochs: int = checked(positive_int, "an integer >= 1")
    batch_size: int = checked(positive_int, "an integer >= 1")
    lr: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    weight_decay: float = checked(lambda v: v >= 0, "a number >= 0")
    clipnorm: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    warmup_fraction: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    early_stopping_patience: int = checked(lambda v: v >= 0, "an integer >= 0")
    monitor: str = checked(lambda v: v in MONITORS, "one of " + ", ".join(MONITORS))
    jit_compile: bool = MISSING
    steps_per_execution: int = checked(positive_int, "an integer >= 1")
    validations_per_epoch: int = checked(positive_int, "an integer >= 1")
    precision: str = checked(lambda v: v in PRECISIONS, "one of " + ", ".join(PRECISIONS))


@dataclass
class AttentionLogConfig:
    every_n_epochs: int = checked(lambda v: v >= 0, "an integer >= 0 (0 disables)")
    num_probes: int = checked(lambda v: is_int(v) and v >= 0, "an integer >= 0")
    probe_texts: List[str] = MISSING
    max_tokens: int = checked(positive_int, "an integer >= 1")


@dataclass
class LoggerConfig:
    tensorboard: bool = MISSING
    attention: AttentionLogConfig = field(default_factory=AttentionLogConfig)
    hparams: bool = MISSING
    overfit_hint: bool = MISSING
    profile_batches: List[int] = checked(
        lambda v: len(v) == 0 or (len(v) == 2 and 1 <= v[0] <= v[1]), "[] or [start, stop] with 1 <= start <= stop"
    )


@dataclass
class TrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
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
    seed: int = checked(lambda v: is_int(v) and 0 <= v < 2**32, "an integer in [0, 4294967295]")
    deterministic: bool = MISSING
    optimized_metric: Optional[str] = MISSING
    # Free-form room for experiment configs (notes, tags); never read by the code.
    tags: Any = None


def schema() -> type:
    """The schema a config is checked against: :class:`TrainConfig` with the extras' settings added
    (``mha_project/extending.py``), new groups after ``logger``, keys inside a group after the core's."""
    import dataclasses
    import typing

    def copied(node: type) -> list[tuple]:
        hints = typing.get_type_hints(node)
        return [
            (f.name, hints[f.name], field(default=f.default, default_factory=f.default_factory, metadata=f.metadata))
            for f in dataclasses.fields(node)
        ]

    def extended(base: type, where: str) -> type:
        # A key two extras share (data.path: a folder's or a table's) is declared by each, added once.
        added = list({item[0]: item for extra in reversed(SETTINGS.get(where, ())) for item in copied(extra)}.values())
        return dataclasses.make_dataclass(base.__name__, added, bases=(base,)) if added else base

    fields = []
    for name, kind, f in copied(TrainConfig):
        if name in ("data", "model", "trainer"):
            group = extended(kind, name)
            f = field(default_factory=group)
            kind = group
        fields.append((name, kind, f))
        if name == "logger":
            fields += [item for extra in SETTINGS.get("", ()) for item in copied(extra)]
    return dataclasses.make_dataclass("TrainConfig", fields)


def register_configs() -> None:
    ConfigStore.instance().store(name="train_schema", node=schema())


def field_checks(node, prefix: str = "") -> list[tuple]:
    """(key, name a user types, check, what is allowed) of every checked field, nested dataclasses included."""
    import dataclasses

    out = []
    for f in dataclasses.fields(node):
        key = f"{prefix}{f.name}"
        if f.metadata.get("ok") is not None:
            shown = f.metadata["shown"] or next((name for name, keys in SHORTCUTS.items() if key in keys), key)
            out.append((key, shown, f.metadata["ok"], f.metadata["allowed"]))
        elif f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            out += field_checks(f.default_factory, f"{key}.")
    return out


def setting_names(node=None, prefix: str = "") -> list[str]:
    """Every dotted key a command line may set (``heads``, ``model.num_heads``, ``logger.attention.max_tokens``)."""
    import dataclasses

    out = []
    for f in dataclasses.fields(node or schema()):
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


def unknown_keys(cfg, node, prefix: str = "") -> list[str]:
    """Dotted keys in ``cfg`` that the dataclass ``node`` does not declare (``+foo=1`` adds such keys)."""
    import dataclasses

    declared = {f.name: f for f in dataclasses.fields(node)}
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
