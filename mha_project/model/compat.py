"""Loading pretraining models saved before the backbone existed (up to commit fde45e6).

They kept the encoder's layers as their own attributes (``embedding``, ``blocks``, ``final_norm``), and a
``.keras`` file stores weights by attribute path. Keras has no hook to rename paths, so the new model's layers
are lent to a model with the old attribute layout, and that model reads the old weights file."""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

import keras

PRETRAINERS = ("MaskedLanguageModel", "ReplacedTokenDetector")


def saved_before_backbone(path) -> bool:
    """Whether ``path`` is a pretraining model whose config predates the backbone."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False  # not ours to judge: keras.saving.load_model reports it
    return config.get("class_name") in PRETRAINERS and "backbone" not in config.get("config", {})


class _OldLayout(keras.Model):
    """The attributes (and so the weight paths) of a pretraining model before the backbone, holding the
    layers of ``model``; created in the old order, which the paths of its unnamed layers depend on."""

    def __init__(self, model):
        super().__init__()
        backbone = model.backbone
        self.embedding = backbone.embedding
        self.embedding_dropout = backbone.embedding_dropout
        self.blocks = backbone.blocks
        self.final_norm = backbone.final_norm
        if hasattr(model, "generator"):
            self.replaced_transform = model.replaced_transform
            self.replaced_logit = model.replaced_logit
            self.generator = _OldLayout(model.generator)
        else:
            self.head = model.head
        self.built = True  # its layers are the model's, built already


def load_saved_before_backbone(path):
    """The model in ``path``, rebuilt with a backbone, with the weights the file holds."""
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
        weights = archive.read("model.weights.h5")
    model = keras.saving.deserialize_keras_object(config, safe_mode=True)  # built from its build_config
    with tempfile.TemporaryDirectory() as scratch:
        file = Path(scratch) / "old.weights.h5"
        file.write_bytes(weights)
        _OldLayout(model).load_weights(file)
    return model
