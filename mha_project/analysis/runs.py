"""Reading a finished run directory back: config, model (safe_mode), vocabulary, metrics, masked LM."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np
from omegaconf import DictConfig, OmegaConf

import mha_project
from mha_project.data.pipeline import encode, pad_batch, truncation_of
from mha_project.data.vocabulary import make_vectorizer, read_vocabulary
from mha_project.errors import UserError
from mha_project.model.backbone import encoder_blocks
from mha_project.run_dir import check_run_dir, no_attention

STAGE_DIR = "pretrain"


MODEL_FILE = "model.keras"


def load_masked_lm(run_dir):
    """The model saved by a run's pretraining stage (``RUN_DIR/pretrain/model.keras``): a
    :class:`MaskedLanguageModel` or a :class:`ReplacedTokenDetector` (whose ``generator`` fills masks)."""
    path = Path(run_dir) / STAGE_DIR / MODEL_FILE
    if not path.is_file():
        raise UserError(
            f"{run_dir} has no masked-LM stage (no {STAGE_DIR}/{MODEL_FILE}): it was trained with pretrain=none, "
            "or its pretraining has not finished; train one with: python scripts/train.py pretrain=mlm"
        )
    return load_model_safely(path)


@dataclass
class Run:
    path: Path
    cfg: DictConfig
    model: object
    vectorizer: object
    metrics: dict

    @property
    def class_names(self) -> list[str]:
        return list(self.metrics["class_names"])

    @property
    def seq_len(self) -> int:
        return int(self.cfg.data.seq_len)

    @property
    def truncation(self) -> str:
        return truncation_of(self.cfg.data)

    def token_ids(self, texts) -> np.ndarray:
        """``model.keras``'s input for ``texts`` (a list of strings, or one string as one text): their ids as
        training made them (vocabulary, seq_len, truncation), padded with 0 to the longest:
        ``run.model(run.token_ids(["the coffee was stale"]))``. No texts: an empty ``(0, 0)`` array."""
        texts = _text_list(texts)
        if not texts:
            return np.zeros((0, 0), "int32")
        return pad_batch(encode(texts, self.vectorizer, self.seq_len, self.truncation))

    def predict(self, texts) -> list[dict]:
        """Per text (a list of strings, or one string as one text), its class probabilities by class name,
        most probable first; no texts, no predictions."""
        texts = _text_list(texts)
        if not texts:
            return []
        probs = self.model.predict(self.token_ids(texts), verbose=0)
        return [dict(sorted(zip(self.class_names, map(float, row)), key=lambda item: -item[1])) for row in probs]


def _text_list(texts) -> list[str]:
    """One string is one text (not one text per character); anything else must be strings."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings; got {type(text).__name__} {text!r}")
    return texts


def load_model_safely(path):
    """``keras.saving.load_model`` with ``safe_mode=True``: code-carrying layers (Lambda) are refused."""
    mha_project.register_keras_objects()  # Keras finds the project's classes by their registered names
    try:
        return keras.saving.load_model(path, safe_mode=True)
    except ValueError as err:
        if "safe_mode" in str(err) or "Lambda" in str(err):
            raise UserError(
                f"refusing to load {path}: it contains a Lambda layer or other arbitrary code, "
                "which safe_mode=True does not deserialise; only models built by mha_project load"
            ) from None
        raise _damaged(path, err) from None
    except Exception as err:  # a truncated or overwritten zip, HDF5 errors, ...: the file is damaged
        raise _damaged(path, err) from None


def _damaged(path, err) -> UserError:
    first = (str(err).strip().splitlines() or [""])[0][:160]
    return UserError(
        f"{path} cannot be loaded ({type(err).__name__}: {first}); the file is damaged: restore it, or "
        "train the run again with overwrite=true"
    )


def load_run(path, needs_attention: bool = False) -> Run:
    """The finished run in ``path``; ``needs_attention``: refused when its model has no attention layers."""
    path = check_run_dir(path)
    try:
        cfg = OmegaConf.load(path / ".hydra" / "config.yaml")
        if not isinstance(cfg, DictConfig) or "data" not in cfg or "model" not in cfg:
            raise ValueError("no data/model sections")
    except Exception as err:  # YAML syntax errors come in several exception types
        raise _damaged(path / ".hydra" / "config.yaml", err) from None
    try:
        metrics = json.loads((path / "metrics.json").read_text())
        missing = [k for k in ("test_accuracy", "class_names") if not isinstance(metrics, dict) or k not in metrics]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
    except ValueError as err:
        raise _damaged(path / "metrics.json", err) from None
    if cfg.data.name == "folder" and not Path(str(cfg.data.path)).is_dir():
        raise UserError(
            f"the data folder this run was trained on, data.path={cfg.data.path}, no longer exists; "
            "move it back (the run's splits and test set are defined by it)"
        )
    model = load_model_safely(path / "model.keras")
    if needs_attention and not encoder_blocks(model):
        raise no_attention(path, cfg.model.get("ngram_branch"))
    vectorizer = make_vectorizer(None, int(cfg.data.vocab_size), vocabulary=read_vocabulary(path / "vocab.txt"))
    return Run(path, cfg, model, vectorizer, metrics)
