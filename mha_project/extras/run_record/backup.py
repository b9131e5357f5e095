"""Keras's ``BackupAndRestore``, made to resume exactly: what lets a killed fit go on where it stopped (a
:class:`record.ResumableRecord` gives it to every fit), and history.csv trimmed to the epochs it kept."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import keras
import numpy as np

from mha_project.atomic import write_json_atomic


class ResumableBackup(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore(double_checkpoint=True)`` that also survives a kill during the first backup and
    keeps the random state of the dropout layers, so that a resumed fit ends as the fit never killed.

    Keras falls back to the previous backup when the latest one is unreadable, but raises when there is
    no previous one (a kill while the first epoch's backup was being written). Then the unreadable
    backup is discarded and training starts again: at most that one epoch is lost.

    Keras's weights files hold no ``SeedGenerator`` state, so a resumed run would draw the first epoch's
    dropout masks again; ``seed_states.json`` keeps them for the last two backed-up epochs (Keras keeps two).
    :meth:`restore` is called before ``fit`` (the caller needs the epoch it resumes from); ``fit``'s
    ``on_train_begin`` then restores nothing twice.
    """

    def __init__(self, backup_dir, history_csv=None):
        super().__init__(str(backup_dir), save_freq="epoch", double_checkpoint=True)
        self.history_csv = history_csv
        self.seed_states = Path(backup_dir) / "seed_states.json"
        self.restored = None

    def restore(self, model) -> int:
        """Load the backup into ``model``; return the epochs it had completed (0 without one)."""
        self.set_model(model)
        try:
            super().on_train_begin()
        except (OSError, ValueError) as err:
            logging.getLogger(__name__).warning(
                f"notice: backup in {self.backup_dir} was cut off mid-write ({type(err).__name__}); "
                "starting this run's training again"
            )
            shutil.rmtree(self.backup_dir, ignore_errors=True)
            if self.history_csv is not None:  # its rows describe the epochs that are now trained again
                trim_history(self.history_csv, 0)
        self.restored = backed_up_epochs(self.backup_dir)
        states = _read_json(self.seed_states).get(str(self.restored))
        if states is not None:
            for variable, value in zip(_seed_variables(model), states):
                variable.assign(np.asarray(value, dtype=variable.dtype))
        return self.restored

    def on_train_begin(self, logs=None):
        if self.restored is None:
            self.restore(self.model)

    def on_epoch_end(self, epoch, logs=None):
        # The seeds first: a backup of epoch e is only ever read with the seed states of epoch e beside it.
        states = _read_json(self.seed_states)
        states = {k: v for k, v in states.items() if int(k) >= epoch}  # this epoch's and the one before it
        states[str(epoch + 1)] = [keras.ops.convert_to_numpy(v).tolist() for v in _seed_variables(self.model)]
        write_json_atomic(self.seed_states, states)
        super().on_epoch_end(epoch, logs)


def _seed_variables(model) -> list:
    """The dropout layers' random state (``SeedGenerator`` variables), in the model's own order."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights and "seed_generator" in v.path]


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def trim_history(path: Path, epochs_done: int) -> list[dict]:
    """Keep history.csv's header and its whole rows of epochs 1..``epochs_done``; return them. A last line cut
    off by a kill or a full disk (no line end) is dropped: its epoch is trained again. Rewritten in place (not
    renamed) because the CSV logger appends to the same file afterwards."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        text = f.read()
    whole = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    reader = csv.DictReader(whole.splitlines(keepends=True))
    fields = reader.fieldnames or []
    all_rows = [r for r in reader if r.get("epoch", "").strip().isdigit()]
    rows = [r for r in all_rows if int(r["epoch"]) <= epochs_done and None not in r.values()]
    if len(rows) != len(all_rows) or whole != text:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return rows


def backed_up_epochs(backup_dir: Path) -> int:
    """Epochs completed according to BackupAndRestore's metadata (0 when there is no backup)."""
    try:
        return int(json.loads((Path(backup_dir) / "training_metadata.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
