"""A run directory is a record of one model: ``run.json`` holds the run's format, the last finished stage and
what each stage recorded (with the run_record extra, its identity too: a fingerprint of the config).

:func:`new_run` is how ``train`` opens one by default: a new or empty directory only (resuming a run, or
replacing one, needs to know which run a directory holds: the run_record extra)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from mha_project.atomic import write_json_atomic
from mha_project.errors import RunDirRefused, message_line

IDENTITY_FILE = "run.json"
FAILURE_FILE = "failure.json"  # why a run stopped before it finished (the run_record extra writes it)
MODEL_FILE = "model.keras"  # the trained classifier
VOCAB_FILE = "vocab.txt"  # the TextVectorization vocabulary, one word a line
METRICS_FILE = "metrics.json"  # written last: its presence means the run finished
STAGE_DIR = "pretrain"  # what a stage before the fit writes (its own model.keras, history, TensorBoard)
LOCK_FILE = ".lock"  # the run_record extra's
ANALYSIS_TB = "analysis"  # the one TensorBoard run (under tensorboard/) the analysis tools write into

# What run.json's "format" says: the layout of a run directory and of the models in it that this version
# writes and reads. Another format is refused in one line (no compatibility code before 1.0): train again.
RUN_FORMAT = 8  # the config's parts are `_target_` nodes; the backbone's blocks return their scores in its graph

# Stages in order; run.json's "stage" is the last one finished.
STAGES = ("started", "pretrained", "trained", "tested", "saved", "finished")
# What may stand in a new run directory before train() opens it: the lock, the log Hydra starts, and the
# failure.json of a start that was refused before it recorded anything.
PRESENT_BEFORE_START = (LOCK_FILE, "train.log", FAILURE_FILE)


@dataclass
class RunRecord:
    """The open run directory: its path, stage, the results saved by finished stages, and its identity (the
    run_record extra's fingerprint of the config). A record that can resume a fit gives it a backup to restore
    (:meth:`backup`) and the epochs it had trained (:meth:`previous_epochs`); this one starts every fit afresh."""

    path: Path
    stage: str = "started"
    results: dict = field(default_factory=dict)
    identity: dict = field(default_factory=dict)

    def backup(self, stage_dir: Path):
        """A Keras callback that backs up each epoch of the fit in ``stage_dir`` and ``restore(model) -> epochs``
        it had completed; None: the fit is not backed up."""
        return None

    def previous_epochs(self, stage_dir: Path) -> list[dict]:
        """``stage_dir/history.csv``'s rows of the epochs a resumed fit does not train again."""
        return []

    def done(self, stage: str) -> bool:
        return STAGES.index(self.stage) >= STAGES.index(stage)

    @property
    def finished(self) -> bool:
        """Every stage done and ``metrics.json`` written: nothing is left to do."""
        return self.done("finished") and (self.path / METRICS_FILE).exists()

    def finish_stage(self, stage: str, **results) -> None:
        """Record ``stage`` (and any results it produced) as finished, atomically."""
        self.stage = stage
        self.results.update(results)
        record = {"format": RUN_FORMAT, **self.identity, "stage": self.stage, "results": self.results}
        write_json_atomic(self.path / IDENTITY_FILE, record)


@contextlib.contextmanager
def new_run(cfg: DictConfig, path: Path):
    """How ``train`` opens its run directory by default: a new or empty one only, as a :class:`RunRecord`. The
    run_record extra opens one that holds this config's own run to resume it (``run_record: {_target_: ...}``)."""
    path.mkdir(parents=True, exist_ok=True)
    found = files_in(path)
    if found:
        raise RunDirRefused(f"{path} already holds files ({', '.join(found)}); use a new hydra.run.dir")
    record = RunRecord(path)
    record.finish_stage("started")
    yield record


def files_in(path: Path, limit: int = 3) -> list[str]:
    """The first ``limit`` entries of ``path`` other than those a new run dir may hold (``PRESENT_BEFORE_START``)."""
    names = sorted(p.name for p in path.iterdir() if p.name not in PRESENT_BEFORE_START)
    return names[:limit] + ([f"... {len(names) - limit} more"] if len(names) > limit else [])


def read_record(path: Path) -> dict | None:
    """What ``path``'s run.json holds (None when there is none); a one-line RunDirRefused when it is damaged.
    Only a regular file is opened: a FIFO would block its reader forever."""
    file = Path(path) / IDENTITY_FILE
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RunDirRefused(f"{file} is damaged: {err.strerror or err}; {RETRAIN}") from None
    if not stat.S_ISREG(mode):
        raise RunDirRefused(f"{file} is damaged: it is not a regular file; {RETRAIN}")
    try:
        stored = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RunDirRefused(f"{file} is damaged: it is not valid JSON ({message_line(err)}); {RETRAIN}") from None
    found = stored.get("format") if isinstance(stored, dict) else None
    if not isinstance(stored, dict) or (found is not None and (isinstance(found, bool) or not isinstance(found, int))):
        shown = (
            f"its format is {found!r}, not a whole number"
            if isinstance(stored, dict)
            else (f"it holds a JSON {type(stored).__name__}, not a run record")
        )
        raise RunDirRefused(f"{file} is damaged: {shown}; {RETRAIN}")
    if found == RUN_FORMAT and stored.get("stage", "started") not in STAGES:
        raise RunDirRefused(
            f"{file} is damaged: its stage {stored['stage']!r} is none of {', '.join(STAGES)}; {RETRAIN}"
        )
    if found == RUN_FORMAT and not isinstance(stored.setdefault("results", {}), dict):
        raise RunDirRefused(f"{file} is damaged: its results are not a JSON object; {RETRAIN}")
    return stored


RETRAIN = "restore it, or train the run again in a new hydra.run.dir"


def other_format(path: Path, found) -> str:
    return (
        f"{path} holds a run of format {found if found is not None else '0 (no format recorded)'}, written by "
        f"another version of mha-project; this version reads run format {RUN_FORMAT}: train it again in a new "
        "hydra.run.dir, or use the release that wrote it"
    )


# outputs/runs/latest (and outputs/debug/latest): a small file naming the last run that finished beside it (the
# run_record extra writes it). A file, not a symbolic link: TensorBoard walks outputs/ and would show a linked
# run twice. Every tool that takes a run directory takes this file too.
LATEST = "latest"
LATEST_MARK = "# mha-project: the last run that finished in this folder"


def latest_target(path: Path) -> Path | None:
    """The run a ``latest`` file written by the project names, or None when ``path`` is no such file."""
    if path.name != LATEST or path.is_symlink() or not path.is_file() or path.stat().st_size > 4096:
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if len(lines) != 2 or lines[1] != LATEST_MARK or "/" in lines[0] or lines[0] in ("", ".", ".."):
        return None
    return path.parent / lines[0]
