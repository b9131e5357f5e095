"""A run directory is a record of one model: ``run.json`` holds the run's format, its identity (a fingerprint
of the config that decides the model), the last finished stage and what each stage recorded.

:func:`open_run_dir` is how ``train`` opens one: a new or empty directory starts a run; one that holds this
config's own run resumes it after its last finished stage (or reports it finished); anything else is refused
in one line before anything in it is written. :func:`check_run_dir` is the reading side's first question (is
this a finished run?), standard library only, so the tools answer a wrong path before TensorFlow loads."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mha_project.atomic import write_json_atomic
from mha_project.config import keras_backend
from mha_project.errors import RunDirRefused, UserError, message_line, typed

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
# What holds something learned: while none exists, a run that stopped at "started" is started again.
LEARNED = (STAGE_DIR, "history.csv", "backup", "checkpoints", MODEL_FILE, METRICS_FILE)
# What may stand in a new run directory before train() opens it: the lock, and the log Hydra starts.
PRESENT_BEFORE_START = (LOCK_FILE, "train.log")


@dataclass
class RunRecord:
    """The open run directory: its path, stage, the results saved by finished stages, and its identity."""

    path: Path
    stage: str = "started"
    results: dict = field(default_factory=dict)
    identity: dict = field(default_factory=dict)

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


def identity(cfg: DictConfig) -> dict:
    """What decides the model a run holds, as plain data: every part the config builds (a node with a
    ``_target_``: the data, the model, the optimizer, the loss, a stage before the fit), the trainer, the seed,
    determinism and the Keras backend; never what is only logged (probe texts) or where."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    decides = {k: v for k, v in resolved.items() if isinstance(v, dict) and "_target_" in v}
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


def open_run_dir(cfg: DictConfig, path: Path) -> RunRecord:
    """The run directory ``path`` for a run of ``cfg``: a new record in a new or empty directory, or the record
    of this config's own run to resume; RunDirRefused in one line for anything else, before anything is written."""
    path.mkdir(parents=True, exist_ok=True)
    ident = identity(cfg)
    stamp = {"fingerprint": fingerprint(ident), "config": ident}
    stored = read_record(path)
    if stored is not None and stored.get("stage") == "started" and not any((path / f).exists() for f in LEARNED):
        stored = {}  # a run that stopped before it learned anything (a bad data path, say): start it afresh
    if not stored:
        found = files_in(path)
        if found and stored is None:
            raise RunDirRefused(
                f"{path} already holds files that no run of mha-project recorded ({', '.join(found)}); they are left "
                "alone: use a new hydra.run.dir, or move them out first"
            )
    elif stored.get("format") != RUN_FORMAT:
        raise RunDirRefused(other_format(path, stored.get("format")))
    elif stored.get("fingerprint") != stamp["fingerprint"]:
        diff = "; ".join(differences(stored.get("config") or {}, ident))
        raise RunDirRefused(f"{path} holds a different run ({diff}); use a new hydra.run.dir")
    else:
        return RunRecord(path, stored.get("stage", "started"), stored.get("results") or {}, stamp)
    record = RunRecord(path, identity=stamp)
    record.finish_stage("started")
    return record


def files_in(path: Path, limit: int = 3) -> list[str]:
    """The first ``limit`` entries of ``path`` other than the lock and Hydra's log (a new dir has none)."""
    names = sorted(p.name for p in path.iterdir() if p.name not in PRESENT_BEFORE_START)
    return names[:limit] + ([f"... {len(names) - limit} more"] if len(names) > limit else [])


def read_record(path: Path) -> dict | None:
    """What ``path``'s run.json holds (None when there is none); a one-line RunDirRefused when it is damaged.
    Only a regular file is opened: a FIFO would block its reader forever."""
    file = Path(path) / IDENTITY_FILE
    try:
        if not stat.S_ISREG(os.stat(file).st_mode):
            raise ValueError("it is not a regular file")
        stored = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise RunDirRefused(f"{file} is unreadable ({message_line(err)}); {RETRAIN}") from None
    found = stored.get("format") if isinstance(stored, dict) else None
    if not isinstance(stored, dict) or (found is not None and (isinstance(found, bool) or not isinstance(found, int))):
        shown = f"its format is {found!r}" if isinstance(stored, dict) else f"it holds a JSON {type(stored).__name__}"
        raise RunDirRefused(f"{file} is damaged: {shown}, not a run record; {RETRAIN}")
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
