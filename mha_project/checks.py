"""The checks a schema cannot express: values that depend on each other, on the machine, the environment or
the file system. :func:`validate_config` runs each field's own range check (``checked`` in
:mod:`mha_project.config`), then one check per section, and raises :class:`ConfigError` with one line naming
the key, the value and what is allowed. No TensorFlow: Hydra's callback runs it before anything loads."""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from mha_project.config import (
    field_checks,
    keras_backend,
    not_a_setting,
    schema,
    unknown_keys,
)
from mha_project.errors import ConfigError, causes, typed
from mha_project.extending import CHECKS


def validate_config(cfg: DictConfig) -> None:
    """Raise ConfigError for the first value that is out of range. Touches no file."""
    declared = schema()  # the core's settings and the extras'
    try:  # a resolver that refuses a value (an extra's) raises ConfigError inside OmegaConf's own error
        for key in cfg:  # reading a value resolves it; Hydra's own node resolves per job, later
            if key != "hydra" and OmegaConf.is_config(cfg[key]):
                OmegaConf.to_container(cfg[key], resolve=True)
    except InterpolationResolutionError as err:
        refused = next((cause for cause in causes(err) if isinstance(cause, ConfigError)), None)
        if refused is None:
            raise
        raise refused from None
    unknown = unknown_keys(cfg, declared)
    if unknown:
        raise ConfigError(not_a_setting(unknown[0]))
    _check_backend()
    for key, shown, ok, allowed in field_checks(declared):
        value = OmegaConf.select(cfg, key)
        try:
            good = ok(value)
        except TypeError:
            good = False
        if not good:
            where = "" if shown == key else f" ({key})"
            allowed = allowed() if callable(allowed) else allowed
            raise ConfigError(f"{shown}={typed(value)}{where} is invalid: must be {allowed}")
    _check_data(cfg)
    _check_model(cfg)
    _check_logger(cfg)
    for check in CHECKS:  # the extras' own (mha_project/extending.py)
        check(cfg)


def _check_data(cfg: DictConfig) -> None:
    if cfg.data.seq_len > cfg.model.max_len:
        raise ConfigError(
            f"data.seq_len={cfg.data.seq_len} is invalid: must be <= model.max_len={cfg.model.max_len} "
            "(the position table's length); set seq_len=N to change both"
        )


def _check_model(cfg: DictConfig) -> None:
    _check_attention_memory(cfg)


def _check_logger(cfg: DictConfig) -> None:
    for text in cfg.logger.attention.probe_texts:
        if not _has_words(text):
            raise ConfigError(
                f"logger.attention.probe_texts has {text!r}, which has no words after lower-casing and "
                "removing punctuation (as TextVectorization does): give probes with words"
            )


def attention_memory_bytes(batch_size: int, num_heads: int, num_layers: int, length: int) -> int:
    """About what one training step's attention needs at ``length`` tokens: per layer the scores, the
    probabilities and their gradient, ``batch x heads x length^2`` float32 values each."""
    return 3 * num_layers * batch_size * num_heads * length * length * 4


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


BACKENDS = ("tensorflow", "jax")  # Keras backends this project trains on (README "Keras backends and several devices")


def _check_backend() -> None:
    import importlib.util

    backend = keras_backend()
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


def _has_words(text: str) -> bool:
    """Whether Keras's default standardisation (lower case, strip ASCII punctuation) leaves a token."""
    import re
    import string

    return bool(re.sub(f"[{re.escape(string.punctuation)}]", " ", str(text)).split())


def check_activation(cfg: DictConfig) -> None:
    """``model.activation`` names a Keras activation (asked of Keras, so only once it is loaded)."""
    import keras

    try:
        keras.activations.get(cfg.model.activation)
    except ValueError:
        raise ConfigError(
            f"model.activation={cfg.model.activation} is invalid: must be a Keras activation "
            "name such as gelu, relu, silu, tanh"
        ) from None
