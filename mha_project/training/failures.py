"""How a run that cannot go on says so: one line naming what happened and what is kept."""

from __future__ import annotations

import errno
import logging
import math
from pathlib import Path

from omegaconf import DictConfig

from mha_project.atomic import write_json_atomic
from mha_project.errors import UserError, causes, message_line
from mha_project.run_dir import FAILURE_FILE

log = logging.getLogger("mha_project.training.train")


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or an exception it was raised from) says the disk or quota is full; TensorFlow and
    h5py report it as their own error types with the OS's message inside."""
    for cause in causes(err):
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(cause) or "Disk quota exceeded" in str(cause):
            return True
    return False


def diverged_message(cfg: DictConfig, counter, best_weights: Path, validations_per_epoch: int) -> str:
    """The one line a diverged run ends with: the epoch, and what (if anything) is kept."""
    keras_epoch = counter.diverged_epoch or counter.last_epoch + 1
    epoch = math.ceil(keras_epoch / validations_per_epoch)
    if best_weights.exists():
        kept = f"the best epoch with finite weights is kept in {best_weights}"
    else:
        kept = "no epoch ended with finite weights, so no checkpoint is kept"
    return (
        f"training diverged: loss became NaN/inf in epoch {epoch} of {cfg.trainer.epochs} with "
        f"lr={cfg.trainer.lr}; {kept} and no test result is recorded; try a smaller lr"
    )


def write_failure(run_dir: Path, reason: str, stage: str | None = None, overrides=(), traceback=None) -> None:
    """``failure.json``: why the run stopped, for the tools that read the directory (and for a person); one
    schema, whether ``train`` recorded it (the stage it reached) or a sweep's job did (its overrides, and the
    traceback of a bug)."""
    record = {
        "status": "failed",
        "stage": stage,
        "reason": reason,
        "overrides": list(overrides),
        "traceback": traceback,
    }
    try:
        write_json_atomic(Path(run_dir) / FAILURE_FILE, record)
    except OSError as write_err:  # e.g. the disk is full: the error itself is the news
        log.warning(f"{FAILURE_FILE} could not be written: {describe(write_err)}")


def describe(err: BaseException) -> str:
    """A user's error as its message; anything else as its type and first line."""
    return str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {message_line(err)[:200]}"
