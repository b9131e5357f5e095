"""Is this a finished run? The reading tools' first question, answered before TensorFlow loads (this module
imports no TensorFlow), so a wrong path costs a second, not a start-up."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from mha_project.errors import RunDirRefused, UserError
from mha_project.run_dir import (
    FAILURE_FILE,
    LATEST,
    METRICS_FILE,
    MODEL_FILE,
    RUN_FORMAT,
    VOCAB_FILE,
    latest_target,
    other_format,
    read_record,
)


def check_run_dir(path, needs_attention: bool = False) -> Path:
    """The finished run directory ``path`` names (a ``latest`` file: the run it names); a one-line UserError
    unless it is one. ``needs_attention``: also unless its model has attention layers (read from its config)."""
    path = Path(path)
    target = latest_target(path)
    if target is not None and not target.is_dir():
        raise UserError(
            f"{path} names run {target.name}, which is not a directory in {path.parent} (moved or deleted); "
            "name a run directory"
        )
    if target is None and path.name == LATEST and (path.is_file() or path.is_symlink()) and not path.is_dir():
        raise UserError(
            f"{path} names no run: it is not the file scripts/train.py writes there (a run's name and a mark); "
            "name a run directory"
        )
    path = target or path
    if not path.is_dir():
        raise UserError(
            f"run dir {path} does not exist or is not a directory "
            "(expected a directory written by scripts/train.py, e.g. outputs/runs/<time>)"
        )
    if (path / FAILURE_FILE).is_file() and not (path / METRICS_FILE).is_file():
        try:
            reason = json.loads((path / FAILURE_FILE).read_text()).get("reason", "no reason recorded")
        except (OSError, ValueError, AttributeError):
            reason = f"its {FAILURE_FILE} is unreadable"
        raise UserError(f"{path} is a run that failed before it finished: {reason}")
    if not (path / ".hydra" / "config.yaml").is_file():
        raise UserError(
            f"{path} is not a run directory: no .hydra/config.yaml "
            "(expected a directory written by scripts/train.py, e.g. outputs/runs/<time>)"
        )
    missing = [name for name in (METRICS_FILE, MODEL_FILE, VOCAB_FILE) if not (path / name).is_file()]
    if missing and (path / METRICS_FILE).is_file():
        raise UserError(
            f"{path} is damaged: it finished, but {', '.join(missing)} is missing; restore the file, or train it "
            "again in a new hydra.run.dir"
        )
    if missing:
        raise UserError(
            f"{path} is a run that never finished (missing {', '.join(missing)}); "
            f"resume it with: python scripts/train.py hydra.run.dir={path} <same overrides>"
        )
    try:
        found = (read_record(path) or {}).get("format")
    except RunDirRefused as err:
        raise UserError(str(err)) from None
    if found != RUN_FORMAT:
        raise UserError(other_format(path, found))
    if needs_attention:
        try:
            cfg = OmegaConf.load(path / ".hydra" / "config.yaml")
        except Exception:  # noqa: BLE001 - a damaged config is reported by the loader, with what to do
            return path
        if not has_attention(cfg):
            raise no_attention(path)
    return path


def has_attention(cfg) -> bool:
    """Whether a run of this config has attention layers (a bag of n-grams alone has no backbone)."""
    return OmegaConf.select(cfg, "model.backbone") is not None


def no_attention(path) -> UserError:
    return UserError(
        f"{path} holds a model without attention layers (a bag of n-grams alone, model.backbone=null): there is no "
        "attention to inspect; use a run with an encoder"
    )


def check_out_folder(out, gets: str) -> None:
    """Refuse, before any work, an ``--out`` folder that is a file or lies under one (``gets``: what it would hold)."""
    if out is None:
        return
    folder = Path(out)
    for place in (folder, *folder.parents):
        if place.exists() and not place.is_dir():
            where = "is a file" if place == folder else f"lies under {place}, which is a file"
            raise UserError(f"--out={out} {where}: --out takes a folder (it gets {gets})")
        if place.exists():
            return
