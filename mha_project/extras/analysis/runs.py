"""Reading a finished run directory back: config, model (safe_mode), vocabulary, metrics, masked LM."""

from __future__ import annotations

import functools
import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from mha_project.quiet import import_tensorflow_quietly

import_tensorflow_quietly()  # the API's first TensorFlow import (a notebook's): its C++ start-up lines hidden

import keras
import numpy as np
from omegaconf import DictConfig, OmegaConf

import mha_project.model.classifier  # noqa: F401  (registers the core's Keras classes: TextClassifier, its backbone, ...)
import mha_project.training.schedules  # noqa: F401  (WarmupCosine, in a saved optimizer)
from mha_project.config import build
from mha_project.data.pipeline import TextPreprocessor, pad_batch
from mha_project.data.vocabulary import saved_vectorizer
from mha_project.errors import UserError, message_line
from mha_project.extras.analysis.finished import check_run_dir, no_attention
from mha_project.model.backbone import encoder_blocks
from mha_project.run_dir import MODEL_FILE, STAGE_DIR

# The only modules a run's config may make a reader import (this project's) or build (and Keras's own classes).
PACKAGE_PREFIX, BUILDABLE = "mha_project.", ("mha_project.", "keras.")


def recorded_targets(node) -> list[str]:
    """Every ``_target_`` in a config node, nested ones included."""
    if OmegaConf.is_dict(node):
        found = [str(node["_target_"])] if "_target_" in node else []
        return found + [t for key in node if key != "_target_" for t in recorded_targets(node._get_node(key))]
    if OmegaConf.is_list(node):
        return [t for item in node for t in recorded_targets(item)]
    return []


def import_recorded_classes(cfg: DictConfig) -> None:
    """Import the modules of the classes a run's model config names (an extra's backbone, its classifier), so
    Keras finds them by their registered names; only this project's modules, never another path a file names."""
    for target in recorded_targets(cfg.get("model")):
        if target.startswith(PACKAGE_PREFIX):
            importlib.import_module(target.rpartition(".")[0])


def build_recorded(node):
    """``instantiate(node)`` for a node read from a run directory, whose targets must be this project's own."""
    outside = [t for t in recorded_targets(node) if not t.startswith(BUILDABLE)]
    if outside:
        raise UserError(f"refusing to build {outside[0]}: a run's config may name only mha_project's and Keras's")
    return build(node)


def load_model(path, cfg: DictConfig | None = None):
    """``keras.saving.load_model`` with ``safe_mode=True`` (code-carrying layers such as Lambda are refused),
    after importing the classes ``cfg`` (the run's config) names; one line for a file that cannot be loaded."""
    if cfg is not None:
        import_recorded_classes(cfg)
    try:
        return keras.saving.load_model(path, safe_mode=True)
    except ValueError as err:
        if "safe_mode" in str(err) or "Lambda" in str(err):
            raise UserError(
                f"refusing to load {path}: it contains a Lambda layer or other arbitrary code, "
                "which safe_mode=True does not deserialise; only models built by mha_project load"
            ) from None
        raise damaged(path, err) from None
    except Exception as err:  # a truncated or overwritten zip, HDF5 errors, ...: the file is damaged
        raise damaged(path, err) from None


def damaged(path, err) -> UserError:
    return UserError(
        f"{path} cannot be loaded ({type(err).__name__}: {message_line(err)[:160]}); the file is damaged: "
        "restore it, or train the run again in a new hydra.run.dir"
    )


def load_masked_lm(run_dir, cfg=None):
    """The model saved by a run's pretraining stage (``RUN_DIR/pretrain/model.keras``): a
    :class:`MaskedLanguageModel` or a :class:`ReplacedTokenDetector` (whose ``generator`` fills masks)."""
    path = Path(run_dir) / STAGE_DIR / MODEL_FILE
    if not path.is_file():
        raise UserError(
            f"{run_dir} has no masked-LM stage (no {STAGE_DIR}/{MODEL_FILE}): it was trained with pretrain=none, "
            "or its pretraining has not finished; train one with: python scripts/train.py pretrain=mlm"
        )
    return load_model(path, cfg)


@dataclass
class Run:
    path: Path
    cfg: DictConfig
    model: object
    preprocessor: TextPreprocessor  # the run's vocabulary, seq_len and truncation
    metrics: dict

    @property
    def class_names(self) -> list[str]:
        return list(self.metrics["class_names"])

    @functools.cached_property
    def source(self):
        """The run's data source (its ``TextData``), built from its recorded config."""
        return build_recorded(self.cfg.data)

    def splits(self):
        """The run's train / validation / test splits, carved with its seed as it trained on them."""
        return self.source.splits(int(self.cfg.seed))

    def batches(self, texts, labels, shuffle: bool = False):
        """Batches of ``texts`` as the run made them (its vocabulary, buckets, batch size, the model's inputs)."""
        return self.source.pipeline(
            texts, labels, self.preprocessor, int(self.cfg.trainer.batch_size), int(self.cfg.seed),
            shuffle=shuffle, text_inputs=getattr(self.model, "text_inputs", None),
        )  # fmt: skip

    def token_ids(self, texts) -> np.ndarray:
        """The encoder's input for ``texts`` (a list of strings, or one string as one text): their ids as
        training made them (vocabulary, seq_len, truncation), padded with 0 to the longest (all of
        ``model.keras``'s input unless it reads more of the text: :meth:`model_inputs`). No texts: an empty
        ``(0, 0)`` array."""
        texts = _text_list(texts)
        if not texts:
            return np.zeros((0, 0), "int32")
        return pad_batch(self.preprocessor.encode(texts))

    def model_inputs(self, texts):
        """``model.keras``'s whole input for ``texts`` (a list of strings, or one string as one text): the
        token ids above, or, for a model that reads more of the raw text, a dict of them and its own inputs:
        ``run.model.predict(run.model_inputs(["the coffee was stale"]))``."""
        return self.preprocessor.model_inputs(self.model, _text_list(texts))

    def predict(self, texts) -> list[dict]:
        """Per text (a list of strings, or one string as one text), its class probabilities by class name,
        most probable first; no texts, no predictions."""
        texts = _text_list(texts)
        if not texts:
            return []
        probs = self.model.predict(self.model_inputs(texts), verbose=0)
        return [dict(sorted(zip(self.class_names, map(float, row)), key=lambda item: -item[1])) for row in probs]


def _text_list(texts) -> list[str]:
    """One string is one text (not one text per character); anything else must be strings."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings; got {type(text).__name__} {text!r}")
    return texts


def load_run(path, needs_attention: bool = False, needs_data: bool = True) -> Run:
    """The finished run in ``path``; ``needs_attention``: refused when its model has no attention layers;
    ``needs_data=False``: a run whose training file or folder has moved still loads (its model and vocabulary
    are in the run directory; only tools that read its splits need the data)."""
    path = check_run_dir(path)
    try:
        cfg = OmegaConf.load(path / ".hydra" / "config.yaml")
        if not isinstance(cfg, DictConfig) or "data" not in cfg or "model" not in cfg:
            raise ValueError("no data/model sections")
    except Exception as err:  # YAML syntax errors come in several exception types
        raise damaged(path / ".hydra" / "config.yaml", err) from None
    try:
        metrics = json.loads((path / "metrics.json").read_text())
        missing = [k for k in ("test_accuracy", "class_names") if not isinstance(metrics, dict) or k not in metrics]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
    except ValueError as err:
        raise damaged(path / "metrics.json", err) from None
    if needs_data and cfg.data.get("path") and not Path(str(cfg.data.path)).exists():
        raise UserError(
            f"the data this run was trained on, data.path={cfg.data.path}, no longer exists; "
            "move it back (the run's splits and test set are defined by it)"
        )
    model = load_model(path / MODEL_FILE, cfg)
    if needs_attention and not encoder_blocks(model):
        raise no_attention(path)
    vectorizer = saved_vectorizer(path / "vocab.txt", cfg.data.vocab_size)
    return Run(path, cfg, model, TextPreprocessor(vectorizer, int(cfg.data.seq_len), str(cfg.data.truncation)), metrics)


def as_run(run, needs_attention: bool = False) -> Run:
    """``run`` loaded by :func:`load_run` when it names a run directory; a ``Run`` already loaded, as it is."""
    return load_run(run, needs_attention=needs_attention) if isinstance(run, (str, Path)) else run
