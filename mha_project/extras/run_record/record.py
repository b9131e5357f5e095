"""A run directory that knows which run it holds: :func:`open_run`, how ``train`` opens its directory with this
extra (``run_record: {_target_: ...open_run}``), checks ``run.json``'s identity (a fingerprint of the resolved
config that decides the result: every part it builds, the trainer, the seed, determinism, the Keras backend;
not what is logged or where) before anything in the directory is written:

* a new or empty directory: the run starts;
* the same fingerprint: the run resumes after its last finished stage (inside the epoch loop through
  ``backup.py``'s ``ResumableBackup``; later stages are not repeated), or, when every stage is done, reports
  "already finished" and rewrites nothing;
* another fingerprint: refused with one line naming the first keys that differ, unless the command says
  ``run_record.overwrite=true`` (the old run's files are then removed first: only the names this project
  writes, and only where a ``run.json`` says the directory is one of its runs);
* files but no ``run.json`` (a user's own work): refused, also with ``overwrite``, since nothing says those files
  are ours to delete; a ``run.json`` of another run format: refused in one line naming both formats;
* another live process on the same directory: refused (an ``flock`` on ``.lock``; the kernel drops it when a
  process dies, so a killed run never leaves a stale lock).

``failure.json`` says why a job stopped and ``outputs/runs/latest`` names the last run that finished
(``callback.py``, a Hydra callback). Written here because neither Keras nor Hydra has the notion:
``BackupAndRestore`` resumes whatever model it is given, and Hydra re-uses a run directory without looking inside."""

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

from mha_project.config import keras_backend
from mha_project.errors import RunDirRefused, UserError, typed
from mha_project.extras.run_record.backup import ResumableBackup, backed_up_epochs, trim_history
from mha_project.extras.run_record.callback import disk_full, failure_reason
from mha_project.run_dir import (
    FAILURE_FILE,
    IDENTITY_FILE,
    LOCK_FILE,
    METRICS_FILE,
    MODEL_FILE,
    RUN_FORMAT,
    STAGE_DIR,
    VOCAB_FILE,
    RunRecord,
    files_in,
    other_format,
    read_record,
)

log = logging.getLogger("mha_project.training.train")

# Files a run writes: what run_record.overwrite=true removes from a directory whose run.json says it is a run.
RUN_FILES = (
    "model_summary.txt",
    METRICS_FILE,
    MODEL_FILE,
    "history.csv",
    VOCAB_FILE,
    "backup",
    "checkpoints",
    "tensorboard",
    ".hydra",
    "pretrain",
    "inspect",
    "export",
    "attention.html",
    "head_patterns",
    "head_importance",
    FAILURE_FILE,
    IDENTITY_FILE,
)

# What holds something learned: while none exists, a run that stopped at "started" may be started again.
LEARNED = (STAGE_DIR, "history.csv", "backup", "checkpoints", MODEL_FILE, METRICS_FILE)


def identity(cfg: DictConfig) -> dict:
    """What decides the model a run holds, as plain data: every part the config builds (a node with a
    ``_target_``: the data, the model, the optimizer, the loss, a stage before the fit), the trainer, the seed,
    determinism and the Keras backend; never what is only logged (probe texts) or where."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    decides = {k: v for k, v in resolved.items() if isinstance(v, dict) and "_target_" in v and k != "run_record"}
    decides |= {k: resolved[k] for k in ("trainer", "seed", "deterministic") if k in resolved}

    def without_probes(node):
        if isinstance(node, dict):
            return {k: without_probes(v) for k, v in node.items() if k != "probe_texts"}
        return node

    return {**without_probes(decides), "backend": keras_backend()}


def fingerprint(ident: dict) -> str:
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def differences(old: dict, new: dict, limit: int = 3) -> list[str]:
    """``key: old -> new`` for the first ``limit`` dotted keys whose values differ."""
    a, b = _flatten(old), _flatten(new)
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, "<absent>") != b.get(k, "<absent>")]
    return [f"{k}: {typed(a.get(k, '<absent>'))} -> {typed(b.get(k, '<absent>'))}" for k in keys[:limit]] + (
        [f"... {len(keys) - limit} more"] if len(keys) > limit else []
    )


def _flatten(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@dataclass
class ResumableRecord(RunRecord):
    """The record of a run directory this process holds the lock of (until :meth:`close`), whose fits back up
    every epoch and resume from their backup."""

    lock_fd: int | None = None

    def backup(self, stage_dir: Path):
        return ResumableBackup(stage_dir / "backup", stage_dir / "history.csv")

    def previous_epochs(self, stage_dir: Path) -> list[dict]:
        # Less those of an epoch cut off before its backup: that epoch is trained again.
        return trim_history(stage_dir / "history.csv", backed_up_epochs(stage_dir / "backup"))

    def close(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the flock
            self.lock_fd = None


@contextlib.contextmanager
def open_run(cfg: DictConfig, path: Path, overwrite: bool = False):
    """The run directory ``path``, locked and checked against ``cfg``, for the length of ``train``; a full disk
    inside is one line naming the stage it stopped in and what is kept."""
    record = open_run_dir(path, cfg, overwrite)
    with contextlib.closing(record):
        with contextlib.suppress(FileNotFoundError):  # an earlier try's: this one decides again
            (path / FAILURE_FILE).unlink()
        if not record.finished and (record.stage != "started" or (path / "history.csv").exists()):
            log.info(f"resuming {path} after stage '{record.stage}'")
        try:
            yield record
        except Exception as err:
            if disk_full(err):
                raise UserError(failure_reason(path, err)) from None
            raise


def open_run_dir(path: Path, cfg: DictConfig, overwrite: bool = False) -> ResumableRecord:
    """Lock ``path`` and check its identity against ``cfg``; raise RunDirRefused before writing anything else."""
    path.mkdir(parents=True, exist_ok=True)
    foreign = files_in(path)
    if foreign and not (path / IDENTITY_FILE).exists():  # only a directory with run.json is ours to replace
        raise RunDirRefused(
            f"{path} already holds files that no run of mha-project recorded ({', '.join(foreign)}); they are "
            "left alone, also with run_record.overwrite=true: use a new hydra.run.dir, or move them out first"
        )
    fd = lock(path)  # after that check: no lock file is left in a directory of someone else's files
    try:
        ident = identity(cfg)
        stamp = {"fingerprint": fingerprint(ident), "config": ident}
        stored = None if overwrite else _read_identity(path)  # overwrite: a damaged run.json is replaced too
        stale = (
            stored is not None and stored.get("stage") == "started" and not any((path / f).exists() for f in LEARNED)
        )
        if stale:
            stored = None  # a run that stopped before it learned anything (a bad data path, say): nothing to keep
        if stored is not None and stored.get("fingerprint") != stamp["fingerprint"]:
            diff = "; ".join(differences(stored.get("config") or {}, ident))
            raise RunDirRefused(
                f"{path} holds a different run ({diff}); use a new hydra.run.dir, or add run_record.overwrite=true "
                "to replace it"
            )
        if stored is None:
            if overwrite or stale:
                _clear(path)
            record = ResumableRecord(path, identity=stamp, lock_fd=fd)
            record.finish_stage("started")
            return record
        return ResumableRecord(path, stored.get("stage", "started"), stored.get("results") or {}, stamp, fd)
    except BaseException:
        os.close(fd)
        raise


def _read_identity(path: Path) -> dict | None:
    file = path / IDENTITY_FILE
    try:
        stored = read_record(path)
    except RunDirRefused as err:
        raise RunDirRefused(f"{err}, or add run_record.overwrite=true to replace the run") from None
    if stored is not None and "fingerprint" not in stored:
        raise RunDirRefused(f"{file} has no fingerprint; use a new hydra.run.dir, or add run_record.overwrite=true")
    if stored is not None and stored.get("format") != RUN_FORMAT:
        raise RunDirRefused(other_format(path, stored.get("format")) + ", or add run_record.overwrite=true")
    return stored


def lock(path: Path) -> int:
    """Hold ``path/.lock`` for this process (refused in one line while another process holds it)."""
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


def _clear(path: Path) -> None:
    """Remove a replaced run's files (never the lock we hold, nor the Hydra log of this process)."""
    for name in RUN_FILES:
        target = path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
