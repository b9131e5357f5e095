"""A run directory is a record of one model: ``run.json`` holds its format, the last finished stage and what
each stage recorded (with the run record extra, its identity too: ``extras/run_record/``).

:func:`new_run` is how ``train`` opens a directory without that extra: a new or empty one only (resuming a
run, or replacing one, needs to know which run a directory holds). :func:`check_run_dir` is the reading
side's first question (is this a finished run?), standard library only, so the analysis scripts answer a
wrong path before TensorFlow loads."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from mha_project import extending
from mha_project.atomic import write_json_atomic
from mha_project.errors import RunDirRefused, UserError, message_line

IDENTITY_FILE = "run.json"
FAILURE_FILE = "failure.json"  # why a run stopped before it finished; the tools name the reason
MODEL_FILE = "model.keras"  # the trained classifier
VOCAB_FILE = "vocab.txt"  # the TextVectorization vocabulary, one word a line (data/vocabulary.py)
STAGE_DIR = "pretrain"  # what the pretraining stage writes (its own model.keras, history, TensorBoard)
LOCK_FILE = ".lock"  # the run record extra's

# What run.json's "format" says: the layout of a run directory and of the models in it that this version
# writes and reads. Another format is refused in one line (no compatibility code before 1.0): train again.
RUN_FORMAT = 7  # the stages of STAGES below; epochs count from 1; metrics.json names its monitor;
# EncoderBlock(position_encoding=...); TokenAndPositionEmbedding(embedding_norm=...)

# The one TensorBoard run (under tensorboard/) that the analysis tools (inspect, head patterns, head
# importance) write into: each tool's tags have their own prefix, and one run per tool would crowd
# TensorBoard's run list, which unticks every run past 40.
ANALYSIS_TB = "analysis"

# What a finished run must hold besides metrics.json for the tools that read it back (analysis/).
REQUIRED = (MODEL_FILE, VOCAB_FILE)
# Stages in order; run.json's "stage" is the last one finished.
STAGES = ("started", "pretrained", "trained", "tested", "saved", "finished")


@dataclass
class RunRecord:
    """The open run directory: its path, stage, the results saved by finished stages, and what else run.json
    says of the run (``identity``: the run record extra's fingerprint and config)."""

    path: Path
    stage: str = "started"
    results: dict = field(default_factory=dict)
    identity: dict = field(default_factory=dict)

    def done(self, stage: str) -> bool:
        return STAGES.index(self.stage) >= STAGES.index(stage)

    @property
    def finished(self) -> bool:
        """Every stage done and ``metrics.json`` written: nothing is left to do."""
        return self.done("finished") and (self.path / "metrics.json").exists()

    def finish_stage(self, stage: str, **results) -> None:
        """Record ``stage`` (and any results it produced) as finished, atomically."""
        self.stage = stage
        self.results.update(results)
        record = {"format": RUN_FORMAT, **self.identity, "stage": self.stage, "results": self.results}
        write_json_atomic(self.path / IDENTITY_FILE, record)


@contextlib.contextmanager
def new_run(cfg, job):
    """A new or empty run directory, for the length of ``train`` (an extra's ``RUN_RECORDS`` may resume one)."""
    path = job.run_dir
    path.mkdir(parents=True, exist_ok=True)
    found = files_in(path)
    if found:
        raise RunDirRefused(f"{path} already holds files ({', '.join(found)}); use a new hydra.run.dir")
    record = RunRecord(path)
    record.finish_stage("started")
    yield record


# What may stand in a new run directory before train() opens it: the lock, and the log Hydra starts.
PRESENT_BEFORE_START = (LOCK_FILE, "train.log")


def files_in(path: Path, limit: int = 3) -> list[str]:
    """The first ``limit`` entries of ``path`` other than the lock and Hydra's log (a new dir has none)."""
    names = sorted(p.name for p in path.iterdir() if p.name not in PRESENT_BEFORE_START)
    return names[:limit] + ([f"... {len(names) - limit} more"] if len(names) > limit else [])


def run_record(file: Path) -> dict | None:
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
        return run_record(file) or {}
    except ValueError as err:
        raise UserError(f"{file} is damaged: {err}; {_RETRAIN}") from None


_RETRAIN = "restore it, or train the run again in a new hydra.run.dir"


def other_format(path: Path, found) -> str:
    return (
        f"{path} holds a run of format {found if found is not None else '0 (no format recorded)'}, written by "
        f"another version of mha-project; this version reads run format {RUN_FORMAT}: train it again in a new "
        "hydra.run.dir, or use the release that wrote it"
    )


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
