"""Self-pretraining (``pretrain=mlm|electra``, ``configs/pretrain/``): a masked-LM or ELECTRA stage on the
training texts before the classifier's fit (``stage.py``; the models in ``models.py``, BERT masking in
``masking.py``), or another run's pretrained backbone (``pretrain.from_run``); ``scripts/fill_mask.py`` asks a
run's masked LM (``fill_mask.py``). Registered with the core: the [MASK] word of the vocabulary, a backbone
source, the checks of ``pretrain.*`` and the Keras classes."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from mha_project.config import keras_backend
from mha_project.errors import ConfigError
from mha_project.extending import (
    BACKBONE_SOURCES,
    HPARAMS,
    IDENTITY_KEYS,
    NOT_IDENTITY,
    RESERVED_WORDS,
    UNLABELED_TEXTS,
    config_check,
    keras_module,
)
from mha_project.extras.pretraining.settings import MASK_TOKEN, uses_pretraining


def reserved_words(cfg) -> list[str]:
    return [MASK_TOKEN] if uses_pretraining(cfg) else []


class _LazyBackboneSource:
    """The stage's backbone source, imported (with TensorFlow) only when a run asks for it."""

    def __init__(self):
        self.source = None

    def _stage(self):
        if self.source is None:
            from mha_project.extras.pretraining.stage import PretrainedBackbone

            self.source = PretrainedBackbone()
        return self.source

    def check(self, cfg, inputs) -> None:
        self._stage().check(cfg, inputs)

    def backbone(self, cfg, job, record, inputs, strategy):
        return self._stage().backbone(cfg, job, record, inputs, strategy)


@config_check
def check_pretrain(cfg) -> None:
    pretrain = cfg.pretrain
    probes = pretrain.probe_texts

    def has_mask(text) -> bool:
        return isinstance(text, str) and "[mask]" in text.lower()

    if not OmegaConf.is_list(probes) or not all(has_mask(t) for t in probes):
        bad = probes if not OmegaConf.is_list(probes) else next(t for t in probes if not has_mask(t))
        raise ConfigError(
            f"pretrain.probe_texts has {bad!r}: each probe must be a sentence with [MASK] where a word goes"
        )
    if pretrain.extra_unlabeled and cfg.data.name not in UNLABELED_TEXTS:
        raise ConfigError(
            f"pretrain.extra_unlabeled=true is invalid with data={cfg.data.name}: it has no unlabeled texts; "
            f"these datasets have: {', '.join(UNLABELED_TEXTS) or 'none here'}"
        )
    if pretrain.extra_unlabeled and pretrain.objective == "none":
        raise ConfigError("pretrain.extra_unlabeled=true needs a pretraining stage: add pretrain=mlm")
    if pretrain.objective == "electra" and keras_backend() != "tensorflow":
        raise ConfigError(
            f"pretrain=electra is invalid with KERAS_BACKEND={keras_backend()}: its train step "
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
    if cfg.model.get("ngram_branch") == "bigram_alone" and uses_pretraining(cfg):
        raise ConfigError(
            "model.ngram_branch=bigram_alone is invalid with pretraining: a bag of n-grams alone has no encoder "
            "to pretrain; use model.ngram_branch=bigram (the bag beside the encoder)"
        )
    processes = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    several = processes.isdigit() and int(processes) > 1
    if cfg.trainer.get("distribution") == "data_parallel" and several and pretrain.objective != "none":
        raise ConfigError(f"pretrain={pretrain.objective} is invalid with {processes} processes: pretrain on one")


IDENTITY_KEYS.append("pretrain")  # the stage's settings decide the backbone the classifier starts from ...
NOT_IDENTITY.append("pretrain.probe_texts")  # ... its probe texts only what it logs
HPARAMS["pretrain"] = "pretrain.objective"
RESERVED_WORDS.append(reserved_words)
BACKBONE_SOURCES.append(_LazyBackboneSource())
keras_module("mha_project.extras.pretraining.models")
