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
import fnmatch
import hashlib
import json
import logging
import os
import stat
import time
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

# The files a run and the analysis tools write, by path in the run directory (``*`` spans folders too): what
# run_record.overwrite=true may delete (not .hydra/: Hydra has written this job's there before train starts). A
# stage before the fit (pretrain/) writes the same files in its folder.
_STAGE_FILES = (
    "model.keras",
    "model_summary.txt",
    "history.csv",
    "checkpoints/best.weights.h5",
    "backup/*.weights.h5*",
    "backup/training_metadata.json*",
    "backup/seed_states.json",
    "tensorboard/*events.out.tfevents.*",
)
OWN_FILES = (
    *_STAGE_FILES,
    *(f"{STAGE_DIR}/{name}" for name in _STAGE_FILES),
    METRICS_FILE,
    VOCAB_FILE,
    FAILURE_FILE,
    "attention.html",
    "export/saved_model.pb",
    "export/fingerprint.pb",
    "export/variables/variables.*",
    "inspect/attention_*.png",
    "head_patterns/head_patterns.png",
    "head_patterns/head_patterns.json",
    "head_importance/head_importance.png",
    "head_importance/head_importance.json",
)


def own_file(relative: str) -> bool:
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in OWN_FILES)


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
        stored = _read_identity(path, overwrite)
        stamp = {"fingerprint": fingerprint(ident), "config": ident, "created_ns": time.time_ns()}
        stale = (
            stored is not None and stored.get("stage") == "started" and not any((path / f).exists() for f in LEARNED)
        )
        if stored is not None and (overwrite or stale):
            _clear(path, stored["created_ns"])  # a run that stopped before it learned anything: nothing to keep
            stored = None
        if stored is not None and stored.get("fingerprint") != stamp["fingerprint"]:
            diff = "; ".join(differences(stored.get("config") or {}, ident))
            raise RunDirRefused(
                f"{path} holds a different run ({diff}); use a new hydra.run.dir, or add run_record.overwrite=true "
                "to replace it"
            )
        if stored is None:
            record = ResumableRecord(path, identity=stamp, lock_fd=fd)
            record.finish_stage("started")
            return record
        stamp["created_ns"] = stored["created_ns"]
        return ResumableRecord(path, stored["stage"], stored["results"], stamp, fd)
    except BaseException:
        os.close(fd)
        raise


def _read_identity(path: Path, overwrite: bool) -> dict | None:
    """run.json, when this version of the project wrote it (its format, fingerprint and creation time); anything
    else is refused in one line, also with ``overwrite``: nothing proves the directory's files are ours."""
    stored = read_record(path)
    if stored is None:
        return None
    if stored.get("format") != RUN_FORMAT:
        raise RunDirRefused(other_format(path, stored.get("format")))
    if not isinstance(stored.get("fingerprint"), str) or not isinstance(stored.get("created_ns"), int):
        raise RunDirRefused(
            f"{path / IDENTITY_FILE} has no identity this project wrote (a fingerprint and a creation time), so "
            f"nothing proves the files in {path} are a run's{'; nothing was deleted' if overwrite else ''}: another "
            "tool's record or a damaged one; use a new hydra.run.dir"
        )
    return stored


def lock(path: Path) -> int:
    """Hold ``path/.lock`` for this process (refused in one line while another process holds it)."""
    try:  # never through a link planted at .lock: it would write this pid into the file it points to
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        what = "a symbolic link" if (path / LOCK_FILE).is_symlink() else err.strerror
        raise RunDirRefused(
            f"{path / LOCK_FILE} cannot be the run's lock ({what}); remove it, or use a new hydra.run.dir"
        ) from None
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


def _clear(path: Path, created_ns: int) -> None:
    """Delete the replaced run's own files: a name the project writes (``OWN_FILES``), a regular file not
    reached through a link, written since the run was created. Anything else stays, and one line says so;
    folders left empty are removed. run.json goes last: until then the directory still proves it is a run."""
    kept = []
    for folder, folders, files in os.walk(path):  # os.walk does not follow links to folders
        for name in files + [d for d in folders if os.path.islink(os.path.join(folder, d))]:
            file = Path(folder, name)
            relative = file.relative_to(path).as_posix()
            if relative in (LOCK_FILE, "train.log", IDENTITY_FILE):
                continue
            st = file.lstat()  # the entry itself: a link is no regular file, and is kept
            if own_file(relative) and stat.S_ISREG(st.st_mode) and st.st_mtime_ns >= created_ns:
                file.unlink()
            else:
                kept.append(relative)
    for folder, _, _ in sorted(os.walk(path), key=lambda walked: -len(walked[0])):
        if Path(folder) != path and not os.listdir(folder):
            os.rmdir(folder)
    (path / IDENTITY_FILE).unlink()
    if kept:
        shown = ", ".join(sorted(kept)[:8]) + (f" and {len(kept) - 8} more" if len(kept) > 8 else "")
        log.info(f"run_record.overwrite=true kept what this project did not write in {path}: {shown}")
