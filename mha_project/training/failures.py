"""How a run that cannot go on says so: one line naming what happened and what is kept."""

from __future__ import annotations

import errno
import math
from pathlib import Path

from omegaconf import DictConfig

from mha_project.run_dir import STAGES

# What each stage does while it runs (run.json's stage is the last one finished).
STAGE_WORK = {
    "pretrained": "pretraining",
    "trained": "training",
    "tested": "testing",
    "saved": "saving model.keras",
    "exported": "exporting the SavedModel",
    "finished": "writing metrics.json",
}


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or an exception it was raised from) says the disk or quota is full; TensorFlow and
    h5py report it as their own error types with the OS's message inside."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(err) or "Disk quota exceeded" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full_message(err: BaseException, record) -> str:
    stage = STAGES[min(STAGES.index(record.stage) + 1, len(STAGES) - 1)]
    file = getattr(err, "filename", None)
    return (
        f"no space left on device while {STAGE_WORK.get(stage, stage)}{f' ({file})' if file else ''}; "
        f"{record.path} keeps what finished before (stage '{record.stage}'): free some space and run the same "
        "command again to resume"
    )


def diverged_message(cfg: DictConfig, counter, best_weights: Path, rounds: int) -> str:
    """The one line a diverged run ends with: the epoch, and what (if anything) is kept."""
    keras_epoch = counter.diverged_epoch or counter.last_epoch + 1
    epoch = math.ceil(keras_epoch / rounds)
    if best_weights.exists():
        kept = f"the best epoch with finite weights is kept in {best_weights}"
    else:
        kept = "no epoch ended with finite weights, so no checkpoint is kept"
    return (
        f"training diverged: loss became NaN/inf in epoch {epoch} of {cfg.trainer.epochs} with "
        f"lr={cfg.trainer.lr}; {kept} and no test result is recorded; try a smaller lr"
    )


def first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"
