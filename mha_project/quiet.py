"""Quiet libraries: TensorFlow's C++ start-up lines, and one library's log for one call whose messages say
nothing to the user."""

from __future__ import annotations

import contextlib
import logging
import os
import sys


@contextlib.contextmanager
def loggers_at(level: int, *names: str):
    """The loggers ``names`` at ``level`` (e.g. ``logging.ERROR``) inside the block, as they were after it."""
    loggers = [logging.getLogger(name) for name in names]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, before in zip(loggers, saved):
            logger.setLevel(before)


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and let it look for devices with file descriptor 2 pointed at /dev/null.

    On a CPU machine TensorFlow 2.21 writes start-up lines (oneDNN notices, "Could not find cuda drivers",
    "failed call to cuInit") from C++ through absl, before ``TF_CPP_MIN_LOG_LEVEL`` applies, so only the file
    descriptor can hide them. Each entry point calls this once its arguments are checked, before it imports
    what imports TensorFlow. ``TF_CPP_MIN_LOG_LEVEL=0`` shows them.
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
