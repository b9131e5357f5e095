"""Ask a run's masked language model to fill in ``[MASK]``."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from mha_project.analysis.runs import load_masked_lm
from mha_project.data.masking import MASK_TOKEN
from mha_project.data.pipeline import truncation_of
from mha_project.data.vocabulary import saved_vectorizer
from mha_project.errors import UserError
from mha_project.model.fill_mask import fill_mask
from mha_project.run_dir import MODEL_FILE, STAGE_DIR


def fill_mask_in_run(run_dir, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """:func:`fill_mask` with a run directory's masked LM, vocabulary and seq_len."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run dir {run_dir} does not exist or is not a directory")
    if not (run_dir / ".hydra" / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run directory: no .hydra/config.yaml")
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    source = cfg.pretrain.from_run
    if source and not (run_dir / STAGE_DIR / MODEL_FILE).is_file():
        raise UserError(
            f"{run_dir} did not pretrain: its encoder came from pretrain.from_run={source}; "
            f"ask that run: python scripts/fill_mask.py {source} ..."
        )
    if "[mask]" not in text.lower():  # before the model loads: a typo gets its answer at once
        raise UserError(f"text {text!r} has no {MASK_TOKEN}: write {MASK_TOKEN} where a word should be predicted")
    model = load_masked_lm(run_dir)
    vectorizer = saved_vectorizer(run_dir / "vocab.txt", cfg.data.vocab_size)
    return fill_mask(model, vectorizer, text, int(cfg.data.seq_len), top_k, truncation_of(cfg.data))
