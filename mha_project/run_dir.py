"""A run directory is a record of one model: its identity, its lock, and how far it got.

``run.json`` holds the run's identity, a fingerprint of the resolved configuration that decides the
result (data, model, trainer, seed, determinism; not what is logged or where), and the last finished
stage. :func:`open_run_dir` checks it before anything in the directory is written:

* a new or empty directory: the run starts;
* the same fingerprint: the run resumes after its last finished stage (``train`` resumes inside the
  epoch loop through ``BackupAndRestore``; later stages are not repeated), or, when every stage is
  done, reports "already finished" and rewrites nothing;
* another fingerprint: refused with one line naming the first keys that differ, unless the command
  says ``overwrite=true`` (the old run's files are then removed first: only the names this project
  writes, ``RUN_FILES``, and only where a ``run.json`` says the directory is one of its runs);
* files but no ``run.json`` (a user's own work): refused, also with ``overwrite=true``, since nothing says
  those files are ours to delete;
* a ``run.json`` of another run format (``RUN_FORMAT``, written by another version): refused in one line
  naming both formats; ``overwrite=true`` replaces it, and the reading tools refuse it the same way;
* another live process on the same directory: refused (an ``flock`` on ``.lock``; the kernel drops it
  when a process dies, so a killed run never leaves a stale lock).

:func:`check_run_dir` is the reading side's first question (is this a finished run?), standard library
only, so the analysis scripts answer a wrong path before TensorFlow loads.

Written here because neither Keras nor Hydra has the notion: ``BackupAndRestore`` resumes whatever
model it is given, and Hydra re-uses a run directory without looking inside."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mha_project import extending
from mha_project.atomic import write_json_atomic
from mha_project.config import keras_backend
from mha_project.errors import RunDirRefused, UserError, message_line, typed

IDENTITY_FILE = "run.json"
FAILURE_FILE = "failure.json"  # why a run stopped before it finished (train.py); the tools name the reason
MODEL_FILE = "model.keras"  # the trained classifier
VOCAB_FILE = "vocab.txt"  # the TextVectorization vocabulary, one word a line (data/vocabulary.py)
STAGE_DIR = "pretrain"  # what the pretraining stage writes (its own model.keras, history, TensorBoard)


LOCK_FILE = ".lock"


# What run.json's "format" says: the layout of a run directory and of the models in it that this version
# writes and reads. Another format is refused in one line (no compatibility code before 1.0): train again.
RUN_FORMAT = 4  # the stages of STAGES below; epochs count from 1 in history.csv and TensorBoard

# The one TensorBoard run (under tensorboard/) that the analysis tools (inspect, head patterns, head
# importance) write into: each tool's tags have their own prefix, and one run per tool would crowd
# TensorBoard's run list, which unticks every run past 40.
ANALYSIS_TB = "analysis"

# The parts of the composed config that decide what model the directory ends up holding (with the extras'
# own, extending.IDENTITY_KEYS), and the Keras backend that trains it.
IDENTITY_KEYS = ("data", "model", "trainer", "seed", "deterministic")


# What a finished run must hold besides metrics.json for the tools that read it back (analysis/).
REQUIRED = (MODEL_FILE, VOCAB_FILE)
# Stages in order; run.json's "stage" is the last one finished.
STAGES = ("started", "pretrained", "trained", "tested", "saved", "finished")


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
    IDENTITY_FILE,
)


# Files that hold something learned: while none exists, a "started" run can be replaced freely.
TRAINED_FILES = ("pretrain", "history.csv", "backup", "checkpoints/best.weights.h5", "model.keras", "metrics.json")


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
class RunRecord:
    """The open run directory: its path, identity, stage and the results saved by finished stages."""

    path: Path
    fingerprint: str
    config: dict
    stage: str = "started"
    results: dict = field(default_factory=dict)
    _lock_fd: int | None = None

    def done(self, stage: str) -> bool:
        return STAGES.index(self.stage) >= STAGES.index(stage)

    def finish_stage(self, stage: str, **results) -> None:
        """Record ``stage`` (and any results it produced) as finished, atomically."""
        self.stage = stage
        self.results.update(results)
        write_json_atomic(
            self.path / IDENTITY_FILE,
            {
                "format": RUN_FORMAT,
                "fingerprint": self.fingerprint,
                "stage": self.stage,
                "results": self.results,
                "config": self.config,
            },
        )

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def open_run_dir(path, cfg: DictConfig, overwrite: bool = False) -> RunRecord:
    """Lock ``path`` and check its identity against ``cfg``; raise UserError before writing anything else."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    foreign = _foreign_files(path)
    if foreign and not (path / IDENTITY_FILE).exists():  # only a directory with run.json is ours to replace
        raise RunDirRefused(
            f"{path} already holds files that no run of mha-project recorded ({', '.join(foreign)}); they are "
            "left alone, also with overwrite=true: use a new hydra.run.dir, or move them out first"
        )
    fd = _lock(path)  # after that check: no lock file is left in a directory of someone else's files
    try:
        ident = identity(cfg)
        fp = fingerprint(ident)
        # With overwrite=true a damaged run.json is simply replaced, as its refusal message says.
        stored = None if overwrite else _read_identity(path)
        stale = stored is not None and stored.get("stage") == "started" and not _has_trained_files(path)
        if stale:
            stored = None  # a run that stopped before training anything (e.g. a bad value): nothing to keep
        if stored is not None and stored.get("fingerprint") != fp:
            diff = "; ".join(differences(stored.get("config") or {}, ident))
            raise RunDirRefused(
                f"{path} holds a different run ({diff}); use a new hydra.run.dir, or add overwrite=true to replace it"
            )
        if stored is None:
            if overwrite or stale:
                _clear(path)
            record = RunRecord(path, fp, ident, _lock_fd=fd)
            record.finish_stage("started")
            return record
        return RunRecord(
            path, fp, ident, stage=stored.get("stage", "started"), results=stored.get("results") or {}, _lock_fd=fd
        )
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
        stored = _run_record(file)
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


def _run_record(file: Path) -> dict | None:
    """The record in a run.json (None when there is none), for training and for the tools alike; a ValueError
    saying how it is damaged. Only a regular file is opened: a FIFO would block its reader forever."""
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ValueError(err.strerror or str(err)) from None
    if not stat.S_ISREG(mode):
        raise ValueError("it is not a regular file")
    try:
        stored = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"it is not valid JSON ({message_line(err)})") from None
    if not isinstance(stored, dict):
        raise ValueError(f"it holds a JSON {type(stored).__name__}, not a run record")
    found = stored.get("format")
    if found is not None and (isinstance(found, bool) or not isinstance(found, int)):
        raise ValueError(f"its format is {found!r}, not a whole number")
    return stored


def recorded(path: Path) -> dict:
    """What ``path``'s run.json holds, for a reader: {} when there is none; a one-line UserError when it is
    damaged (not a regular file, not a JSON object, a format that is no whole number)."""
    file = Path(path) / IDENTITY_FILE
    try:
        return _run_record(file) or {}
    except ValueError as err:
        raise UserError(f"{file} is damaged: {err}; {_RETRAIN}") from None


_RETRAIN = "restore it, or train the run again in a new hydra.run.dir"


def other_format(path: Path, found) -> str:
    return (
        f"{path} holds a run of format {found if found is not None else '0 (no format recorded)'}, written by "
        f"another version of mha-project; this version reads run format {RUN_FORMAT}: train it again in a new "
        "hydra.run.dir, or use the release that wrote it"
    )


def _has_trained_files(path: Path) -> bool:
    return any((path / name).exists() for name in TRAINED_FILES)


# What may stand in a new run directory before train() opens it: the lock, and the log Hydra starts.
PRESENT_BEFORE_START = (LOCK_FILE, "train.log")


def _foreign_files(path: Path, limit: int = 3) -> list[str]:
    """The first ``limit`` entries of ``path`` other than the lock and Hydra's log (a new dir has none)."""
    names = sorted(p.name for p in path.iterdir() if p.name not in PRESENT_BEFORE_START)
    return names[:limit] + ([f"... {len(names) - limit} more"] if len(names) > limit else [])


def _clear(path: Path) -> None:
    """Remove a replaced run's files (never the lock we hold, nor the Hydra log of this process)."""
    for name in (*RUN_FILES, *extending.RUN_FILES, "inspect", FAILURE_FILE):
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


# outputs/runs/latest (and outputs/debug/latest): a small file naming the last run that finished beside it.
# A file, not a symbolic link: TensorBoard and other tools that walk outputs/ would follow a link and show
# that run twice. Every tool that takes a run directory takes this file too.
LATEST = "latest"
LATEST_MARK = "# mha-project: the last run that finished in this folder"


def latest_text(run_dir: Path) -> str:
    return f"{run_dir.name}\n{LATEST_MARK}\n"


def latest_target(path: Path) -> Path | None:
    """The run a ``latest`` file written by the project names, or None when ``path`` is no such file."""
    if path.name != LATEST or path.is_symlink() or not path.is_file() or path.stat().st_size > 4096:
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if len(lines) != 2 or lines[1] != LATEST_MARK or "/" in lines[0] or lines[0] in ("", ".", ".."):
        return None
    return path.parent / lines[0]


def check_run_dir(path, needs_attention: bool = False) -> Path:
    """The finished run directory ``path`` names (a ``latest`` file: the run it names); raise a one-line
    UserError unless it is one. ``needs_attention``: also unless its model has attention layers, read from
    its config, so the tools that inspect attention answer before TensorFlow loads."""
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
    if (path / FAILURE_FILE).is_file() and not (path / "metrics.json").is_file():
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
    missing = [name for name in ("metrics.json",) + REQUIRED if not (path / name).is_file()]
    if missing and (path / "metrics.json").is_file():
        raise UserError(
            f"{path} is damaged: it finished, but {', '.join(missing)} is missing; restore the file, or "
            f"train it again with: python scripts/train.py hydra.run.dir={path} <same overrides> overwrite=true"
        )
    if missing:
        raise UserError(
            f"{path} is a run that never finished (missing {', '.join(missing)}); "
            f"resume it with: python scripts/train.py hydra.run.dir={path} <same overrides>"
        )
    found = recorded(path).get("format")
    if found != RUN_FORMAT:
        raise UserError(other_format(path, found))
    if needs_attention:
        try:
            cfg = OmegaConf.load(path / ".hydra" / "config.yaml")
        except Exception:  # noqa: BLE001 - a damaged config is reported by the loader, with what to do
            return path
        if not has_attention(cfg):
            raise no_attention(path, cfg)
    return path


def has_attention(cfg) -> bool:
    """Whether a run of this config has attention layers (an extra's model may have none: a bag of n-grams)."""
    return not any(reason(cfg) for reason in extending.NO_ATTENTION)


def no_attention(path, cfg) -> UserError:
    reasons = (reason(cfg) for reason in extending.NO_ATTENTION)
    said = next((found for found in reasons if found), "holds a model without attention layers: nothing to inspect")
    return UserError(f"{path} {said}")
