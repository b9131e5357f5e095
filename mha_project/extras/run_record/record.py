"""``run.json``'s identity, and the lock: what lets the same command resume a run and refuses another.

The identity is a fingerprint of the resolved configuration that decides the result (data, model, trainer,
seed, determinism, the extras' ``IDENTITY_KEYS``; not what is logged or where) and the Keras backend.
:func:`open_run` checks it before anything in the directory is written:

* a new or empty directory: the run starts;
* the same fingerprint: the run resumes after its last finished stage (``train`` resumes inside the
  epoch loop through ``BackupAndRestore``; later stages are not repeated), or, when every stage is
  done, reports "already finished" and rewrites nothing;
* another fingerprint: refused with one line naming the first keys that differ, unless the command
  says ``overwrite=true`` (the old run's files are then removed first: only the names this project
  writes, ``RUN_FILES``, and only where a ``run.json`` says the directory is one of its runs);
* files but no ``run.json`` (a user's own work): refused, also with ``overwrite=true``, since nothing says
  those files are ours to delete;
* a ``run.json`` of another run format: refused in one line naming both formats; ``overwrite=true``
  replaces it;
* another live process on the same directory: refused (an ``flock`` on ``.lock``; the kernel drops it
  when a process dies, so a killed run never leaves a stale lock).

Written here because neither Keras nor Hydra has the notion: ``BackupAndRestore`` resumes whatever
model it is given, and Hydra re-uses a run directory without looking inside."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mha_project import extending
from mha_project.config import keras_backend
from mha_project.errors import RunDirRefused, UserError, typed
from mha_project.run_dir import (
    FAILURE_FILE,
    IDENTITY_FILE,
    LOCK_FILE,
    MODEL_FILE,
    RUN_FORMAT,
    STAGES,
    VOCAB_FILE,
    RunRecord,
    files_in,
    other_format,
    run_record,
)
from mha_project.training.failures import describe, disk_full, write_failure

log = logging.getLogger("mha_project.training.train")

# The parts of the composed config that decide what model the directory ends up holding (with the extras'
# own, extending.IDENTITY_KEYS), and the Keras backend that trains it.
IDENTITY_KEYS = ("data", "model", "trainer", "seed", "deterministic")

# Files a run writes: what overwrite=true removes from a directory whose run.json says it is a run.
RUN_FILES = (
    "model_summary.txt",
    "metrics.json",
    MODEL_FILE,
    "history.csv",
    VOCAB_FILE,
    "backup",
    "checkpoints",
    "tensorboard",
    ".hydra",
    "pretrain",
    "inspect",
    FAILURE_FILE,
    IDENTITY_FILE,
)

# Files that hold something learned: while none exists, a "started" run can be replaced freely.
TRAINED_FILES = ("pretrain", "history.csv", "backup", "checkpoints/best.weights.h5", "model.keras", "metrics.json")

# What each stage does while it runs (run.json's stage is the last one finished).
STAGE_WORK = {
    "pretrained": "pretraining",
    "trained": "training",
    "tested": "testing",
    "saved": "saving the model",
    "finished": "writing metrics.json",
}


@contextlib.contextmanager
def open_run(cfg: DictConfig, job):
    """The run directory, locked and checked against ``cfg``, for the length of ``train``; a failure inside is
    recorded in ``failure.json``."""
    record = open_run_dir(job.run_dir, cfg, overwrite=cfg.overwrite)
    with contextlib.closing(record), failure_recorded(record):
        if not record.finished and (record.stage != "started" or (record.path / "history.csv").exists()):
            if job.num_processes > 1:  # the other processes kept no backup: they would start from epoch 0
                raise UserError(
                    f"{record.path} holds a run that stopped after stage '{record.stage}'; several processes "
                    f"(KERAS_DISTRIBUTION_NUM_PROCESSES={job.num_processes}) cannot resume it, as only "
                    "process 0 kept its state: resume it as one process, or start a new hydra.run.dir"
                )
            log.info(f"resuming {record.path} after stage '{record.stage}'")
        yield record


def identity(cfg: DictConfig) -> dict:
    """The resolved config values that decide the result, as plain data, and the Keras backend."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    ident = {k: resolved[k] for k in (*IDENTITY_KEYS, *extending.IDENTITY_KEYS) if k in resolved}
    for dotted in extending.NOT_IDENTITY:  # an extra's keys that decide nothing about the model
        group, _, key = dotted.rpartition(".")
        if isinstance(ident.get(group), dict):
            ident[group] = {k: v for k, v in ident[group].items() if k != key}
    ident["backend"] = keras_backend()
    return ident


def fingerprint(ident: dict) -> str:
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def differences(old: dict, new: dict, limit: int = 3) -> list[str]:
    """``key: old -> new`` for the first ``limit`` dotted keys whose values differ."""
    a, b = _flatten(old), _flatten(new)
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, "<absent>") != b.get(k, "<absent>")]
    return [f"{k}: {typed(a.get(k, '<absent>'))} -> {typed(b.get(k, '<absent>'))}" for k in keys[:limit]] + (
        [f"... {len(keys) - limit} more"] if len(keys) > limit else []
    )


@dataclass
class LockedRecord(RunRecord):
    """The record of a run directory this process holds the lock of, until :meth:`close`."""

    lock_fd: int | None = None

    def close(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the flock
            self.lock_fd = None


def open_run_dir(path, cfg: DictConfig, overwrite: bool = False) -> LockedRecord:
    """Lock ``path`` and check its identity against ``cfg``; raise UserError before writing anything else."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    foreign = files_in(path)
    if foreign and not (path / IDENTITY_FILE).exists():  # only a directory with run.json is ours to replace
        raise RunDirRefused(
            f"{path} already holds files that no run of mha-project recorded ({', '.join(foreign)}); they are "
            "left alone, also with overwrite=true: use a new hydra.run.dir, or move them out first"
        )
    fd = _lock(path)  # after that check: no lock file is left in a directory of someone else's files
    try:
        ident = identity(cfg)
        stamp = {"fingerprint": fingerprint(ident), "config": ident}
        # With overwrite=true a damaged run.json is simply replaced, as its refusal message says.
        stored = None if overwrite else _read_identity(path)
        stale = stored is not None and stored.get("stage") == "started" and not _has_trained_files(path)
        if stale:
            stored = None  # a run that stopped before training anything (e.g. a bad value): nothing to keep
        if stored is not None and stored.get("fingerprint") != stamp["fingerprint"]:
            diff = "; ".join(differences(stored.get("config") or {}, ident))
            raise RunDirRefused(
                f"{path} holds a different run ({diff}); use a new hydra.run.dir, or add overwrite=true to replace it"
            )
        if stored is None:
            if overwrite or stale:
                _clear(path)
            record = LockedRecord(path, identity=stamp, lock_fd=fd)
            record.finish_stage("started")
            return record
        return LockedRecord(path, stored.get("stage", "started"), stored.get("results") or {}, stamp, fd)
    except BaseException:
        os.close(fd)
        raise


def _lock(path: Path) -> int:
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunDirRefused(
            f"{path} is in use by another training process (pid {holder}); wait for it to "
            "finish, or use a new hydra.run.dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _read_identity(path: Path) -> dict | None:
    file = path / IDENTITY_FILE
    try:
        stored = run_record(file)
        if stored is not None and "fingerprint" not in stored:
            raise ValueError("no fingerprint")
    except ValueError as err:
        raise RunDirRefused(
            f"{file} is unreadable ({err}); use a new hydra.run.dir, or add overwrite=true to replace the run"
        ) from None
    if stored is None:
        return None
    if stored.get("format") != RUN_FORMAT:
        raise RunDirRefused(other_format(path, stored.get("format")) + ", or add overwrite=true to replace it")
    return stored


def _has_trained_files(path: Path) -> bool:
    return any((path / name).exists() for name in TRAINED_FILES)


def _clear(path: Path) -> None:
    """Remove a replaced run's files (never the lock we hold, nor the Hydra log of this process)."""
    for name in (*RUN_FILES, *extending.RUN_FILES):
        target = path / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def _flatten(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def disk_full_message(err: BaseException, record: RunRecord) -> str:
    stage = STAGES[min(STAGES.index(record.stage) + 1, len(STAGES) - 1)]
    file = getattr(err, "filename", None)
    return (
        f"no space left on device while {STAGE_WORK.get(stage, stage)}{f' ({file})' if file else ''}; "
        f"{record.path} keeps what finished before (stage '{record.stage}'): free some space and run the same "
        "command again to resume"
    )


@contextlib.contextmanager
def failure_recorded(record: RunRecord):
    """Run a try of the run; if it fails, record why in ``failure.json`` (a full disk said in one line). An
    earlier try's ``failure.json`` is removed first: this try decides again."""
    with contextlib.suppress(FileNotFoundError):
        (record.path / FAILURE_FILE).unlink()
    try:
        yield
    except Exception as err:
        reason = disk_full_message(err, record) if disk_full(err) else describe(err)
        write_failure(record.path, reason, stage=record.stage)
        if disk_full(err):
            raise UserError(reason) from None
        raise
