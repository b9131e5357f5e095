"""The run_record extra's Hydra callback (``hydra.callbacks.run_record``): when a job ends, ``failure.json`` says
why it failed, for the tools that read the directory and for a person, and ``outputs/runs/latest`` names the last
run that finished there. Cheap to import (no TensorFlow): Hydra builds its callbacks before the config is checked."""

from __future__ import annotations

import contextlib
import logging
import traceback
from pathlib import Path

from hydra.experimental.callback import Callback

from mha_project.atomic import write_json_atomic, write_text_atomic
from mha_project.errors import RunDirRefused, UserError, causes, disk_full, message_line
from mha_project.run_dir import FAILURE_FILE, LATEST, LATEST_MARK, METRICS_FILE, STAGES, latest_target, read_record
from mha_project.training.hydra_callbacks import job_error

log = logging.getLogger("mha_project.training.train")

# What each stage does while it runs (run.json's stage is the last one finished).
STAGE_WORK = {
    "pretrained": "pretraining",
    "trained": "training",
    "tested": "testing",
    "saved": "saving the model",
    "finished": "writing metrics.json",
}


class RunEnd(Callback):
    def on_job_end(self, config, job_return, **kwargs) -> None:
        run_dir = Path(config.hydra.runtime.output_dir)
        error = job_error(job_return)
        if error is None:
            if (run_dir / METRICS_FILE).is_file() and config.hydra.mode.name != "MULTIRUN":
                point_latest_at(run_dir)
            return
        if isinstance(error, RunDirRefused) or not run_dir.is_dir() or (run_dir / METRICS_FILE).is_file():
            return  # another run, a user's files, or a finished run (a tool's error): left exactly as it was
        bug = None if isinstance(error, UserError) else "".join(traceback.format_exception(error))
        write_failure(run_dir, describe(error), overrides=config.hydra.overrides.task, traceback=bug)


def describe(err: BaseException) -> str:
    """A user's error as its message; anything else as its type and first line."""
    return str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {message_line(err)[:200]}"


def failure_reason(path: Path, err: BaseException) -> str:
    """What ``failure.json`` and the command's one line say: a full disk with the stage it stopped in."""
    if not disk_full(err):
        return describe(err)
    try:
        stage = (read_record(path) or {}).get("stage", "started")
    except RunDirRefused:
        stage = "started"
    working = STAGES[min(STAGES.index(stage) + 1, len(STAGES) - 1)] if stage in STAGES else "finished"
    file = next((c.filename for c in causes(err) if getattr(c, "filename", None)), None)
    return (
        f"no space left on device while {STAGE_WORK.get(working, working)}{f' ({file})' if file else ''}; "
        f"{path} keeps what finished before (stage '{stage}'): free some space and run the same command again "
        "to resume"
    )


def write_failure(path: Path, reason: str, overrides=(), traceback=None) -> None:
    """``failure.json``: why the job stopped; one schema, whatever stopped it."""
    try:
        stage = (read_record(path) or {}).get("stage")
    except RunDirRefused:
        stage = None
    record = {
        "status": "failed",
        "stage": stage,
        "reason": reason,
        "overrides": list(overrides),
        "traceback": traceback,
    }
    try:
        write_json_atomic(path / FAILURE_FILE, record)
    except OSError as write_err:  # e.g. the disk is full: the error itself is the news
        log.warning(f"{FAILURE_FILE} could not be written: {describe(write_err)}")


def point_latest_at(run_dir: Path) -> None:
    """``outputs/runs/latest`` (``outputs/debug/latest`` for ``debug=...`` runs): the file naming the last run
    that finished there; never for other run dirs, and never over a ``latest`` that is not the project's."""
    runs = run_dir.resolve().parent
    if runs.name not in ("runs", "debug") or runs.parent.name != "outputs":
        return
    latest = runs / LATEST
    if (latest.exists() or latest.is_symlink()) and latest_target(latest) is None:
        return  # a folder, link or file of the user's called "latest": left alone
    with contextlib.suppress(OSError):
        write_text_atomic(latest, f"{run_dir.resolve().name}\n{LATEST_MARK}\n")
