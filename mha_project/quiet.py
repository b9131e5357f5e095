"""Quieting one library's log for one call whose messages say nothing to the user."""

from __future__ import annotations

import contextlib
import logging


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
