"""The checks a folder dataset (``data=folder data.path=DIR``) must pass before anything runs; standard library
only: they run while a command line is validated."""

from __future__ import annotations

import functools
import logging
import os

from mha_project.errors import ConfigError

log = logging.getLogger(__name__)


def check_folder_config(data) -> None:
    """``data.path`` is a folder dataset (the ``data`` node's check: ``config.py``)."""
    path = data.path
    if not path:
        raise ConfigError("data=folder needs data.path=DIR (DIR/train/<class>/*.txt and DIR/test/<class>/*.txt)")
    if not os.path.isdir(path):
        raise ConfigError(f"data.path={path} does not exist or is not a directory")
    missing = [s for s in ("train", "test") if not os.path.isdir(os.path.join(path, s))]
    if missing:
        raise ConfigError(
            f"data.path={path} has no {' or '.join(s + '/' for s in missing)} folder: "
            "expected DIR/train/<class>/*.txt and DIR/test/<class>/*.txt"
        )
    check_folder_dataset(path)


def check_folder_dataset(path) -> list[str]:
    """The class folders of an aclImdb-style dataset; ConfigError if it cannot be trained on.

    Folders present in only one split (aclImdb's train/unsup) are not classes; hidden folders
    (``.ipynb_checkpoints``) never are. Files count by Keras's rule: ``.txt`` in any letter case.
    """
    classes = {}
    for split in ("train", "test"):
        root = os.path.join(path, split)
        classes[split] = sorted(
            d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
        )
    common = [c for c in classes["train"] if c in classes["test"]]
    test_only = [c for c in classes["test"] if c not in common]
    if test_only and len(common) >= 2:
        _warn_once(f"data.path={path}: test/{', test/'.join(test_only)} has no train/ twin and is ignored")
    if len(common) < 2:
        raise ConfigError(
            f"data.path={path}: need at least 2 class folders present in both train/ and test/; "
            f"train/ has [{', '.join(classes['train'])}], test/ has [{', '.join(classes['test'])}]"
        )
    for split in ("train", "test"):
        empty = [c for c in common if not any(n.lower().endswith(".txt") for n in os.listdir(f"{path}/{split}/{c}"))]
        if empty:
            raise ConfigError(
                f"data.path={path}: {split}/{empty[0]} has no .txt files: every class needs texts in both "
                f"train/ and test/ (class folders: {', '.join(common)})"
            )
    return common


@functools.cache
def _warn_once(message: str) -> None:
    """Log ``message`` once per process (the folder checks run in the Hydra callback and in train)."""
    log.warning(message)
