"""A masked language model's answer for each ``[MASK]`` in a text: while training (``FillMaskLogger``) and for a
finished run (``fill_mask_in_run``, ``scripts/fill_mask.py``)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import tensorflow as tf
from keras import ops
from omegaconf import OmegaConf

from mha_project.data.pipeline import TextPreprocessor, truncate_token_ids
from mha_project.data.vocabulary import ragged_ids, saved_vectorizer
from mha_project.errors import UserError
from mha_project.extras.analysis.runs import load_masked_lm
from mha_project.extras.pretraining.masking import MASK_TOKEN, mask_id_of
from mha_project.run_dir import MODEL_FILE, STAGE_DIR


def encode_masked_text(text: str, preprocessor: TextPreprocessor) -> np.ndarray:
    """Token ids of ``text`` with each ``[MASK]`` (any letter case) as the mask id; truncated as training
    truncates (the ``preprocessor``'s seq_len and truncation)."""
    vectorizer, seq_len, truncation = preprocessor.vectorizer, preprocessor.seq_len, preprocessor.truncation
    pieces = re.split(r"\[mask\]", text, flags=re.IGNORECASE)
    if len(pieces) == 1:
        raise UserError(f"text {text!r} has no {MASK_TOKEN}: write {MASK_TOKEN} where a word should be predicted")
    mask_id = mask_id_of(vectorizer)
    ids: list[int] = []
    for i, piece in enumerate(pieces):
        if i:
            ids.append(mask_id)
        if piece.strip():
            ids.extend(int(t) for t in ragged_ids(vectorizer, np.asarray([piece], dtype=object)).numpy()[0])
    kept = truncate_token_ids(tf.ragged.constant([ids], dtype=tf.int64), seq_len, truncation)[0].numpy()
    if mask_id not in kept:
        raise UserError(
            f"every {MASK_TOKEN} in the text lies outside the {seq_len} tokens the model reads "
            f"(data.seq_len={seq_len}, data.truncation={truncation})"
        )
    return kept.astype("int32")


def fill_mask(model, preprocessor: TextPreprocessor, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each ``[MASK]`` in ``text``: the ``top_k`` words with their probabilities."""
    ids = encode_masked_text(text, preprocessor)  # checks that there is a [MASK] id
    vocabulary = preprocessor.vectorizer.get_vocabulary()
    mask_id = vocabulary.index(MASK_TOKEN)
    positions = np.flatnonzero(ids == mask_id).astype("int32")
    model = getattr(model, "generator", model)  # ELECTRA: its generator is the masked LM
    logits = model({"token_ids": ids[None, :], "mask_positions": positions[None, :]}, training=False)
    logits = np.asarray(ops.convert_to_numpy(logits), "float64")[0]
    logits[:, [0, mask_id]] = -np.inf  # padding and [MASK] are never the answer
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    top = np.argsort(-probs, axis=-1)[:, :top_k]
    return [[(vocabulary[j], float(p[j])) for j in row] for row, p in zip(top, probs)]


def perplexity(loss: float) -> float:
    return float(math.exp(min(loss, 50.0)))


def fill_mask_in_run(run_dir, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """:func:`fill_mask` with a run directory's masked LM, vocabulary and seq_len."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run dir {run_dir} does not exist or is not a directory")
    if not (run_dir / ".hydra" / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run directory: no .hydra/config.yaml")
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    source = OmegaConf.select(cfg, "pretrain.from_run")
    if source and not (run_dir / STAGE_DIR / MODEL_FILE).is_file():
        raise UserError(
            f"{run_dir} did not pretrain: its encoder came from pretrain.from_run={source}; "
            f"ask that run: python scripts/fill_mask.py {source} ..."
        )
    if "[mask]" not in text.lower():  # before the model loads: a typo gets its answer at once
        raise UserError(f"text {text!r} has no {MASK_TOKEN}: write {MASK_TOKEN} where a word should be predicted")
    model = load_masked_lm(run_dir, cfg)
    vectorizer = saved_vectorizer(run_dir / "vocab.txt", cfg.data.vocab_size)
    return fill_mask(model, TextPreprocessor(vectorizer, int(cfg.data.seq_len), str(cfg.data.truncation)), text, top_k)
