"""What the commands share: a quiet TensorFlow start-up, and how counts, values and tables are written.
(How an error ends a command is the entry points' own: ``scripts/entry.py``.)"""

from __future__ import annotations

import contextlib
import os
import sys


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and let it look for devices with file descriptor 2 pointed at /dev/null.

    On a CPU machine TensorFlow 2.21 writes start-up lines (oneDNN notices, "Could not find cuda drivers",
    "failed call to cuInit") from C++ through absl, before ``TF_CPP_MIN_LOG_LEVEL`` applies, so only the file
    descriptor can hide them. Each entry point calls this once its arguments are checked, before it imports
    what imports TensorFlow; the library itself never touches fd 2. ``TF_CPP_MIN_LOG_LEVEL=0`` shows them.
    """
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_fd_silenced():
        import tensorflow as tf

        tf.config.list_physical_devices()  # device discovery (and its cuInit line) happens here, not later


@contextlib.contextmanager
def _stderr_fd_silenced():
    """Point fd 2 at /dev/null (C++ writes bypass sys.stderr); restore it even on error."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def plural(count, noun: str) -> str:
    """``1 epoch``, ``4 epochs``, ``0.5 epochs``: a count and its noun as a person writes them.

    >>> plural(1, "epoch"), plural(4, "row"), plural(1.5, "epoch")
    ('1 epoch', '4 rows', '1.5 epochs')
    """
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def shown(value) -> str:
    """A value as logs and tables show it: a float to 4 significant digits (a swept ``dropout`` of
    0.3005575058716044 reads 0.3006; the trial trains with the exact value), anything else as it is.

    >>> shown(0.3005575058716044), shown(0.0005), shown(8), shown(True)
    ('0.3006', '0.0005', '8', 'true')
    """
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def cell(value) -> str:
    """A value as the report's tables show it (a float to 4 decimals, None as an empty cell)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if value < 10 else f"{value:.1f}"
    return str(value)


def markdown(header, rows) -> str:
    """A Markdown table of strings (a ``|`` inside a cell becomes ``/``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(text.replace("|", "/") for text in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
