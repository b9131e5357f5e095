"""User-facing errors: the library raises them; an entry point prints one line (no traceback) and exits with
the error's ``exit_code`` (``scripts/entry.py``)."""

from __future__ import annotations

import functools


class UserError(Exception):
    """Something the user can fix: a bad value, a missing file, a run that diverged."""

    exit_code = 2  # a bad value, as argparse exits


class RunDirRefused(UserError):
    """The run directory holds another run, or another process is using it: it must not be written."""


class SweepFailed(UserError):
    """A sweep that ended with jobs refused, or with none finished: the command failed (exit status 1)."""

    exit_code = 1


class Interrupted(UserError):
    """A stop signal (Ctrl-C's SIGINT, SIGTERM) ended the command: exit status 128 + the signal's number."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class CommandFailed(BaseException):
    """``error`` on its way to the entry point through Hydra, which turns an Exception raised in a callback into a
    warning and prints a line of its own for a job's; a BaseException passes both, as SystemExit does."""

    def __init__(self, error: UserError):
        super().__init__(str(error))
        self.error = error


def failing_the_command(method):
    """A Hydra callback's method whose UserError ends the command (as :class:`CommandFailed`)."""

    @functools.wraps(method)
    def wrapped(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except UserError as err:
            raise CommandFailed(err) from None

    return wrapped


class ConfigError(UserError, ValueError):
    """A configuration value that is out of range or names something that does not exist."""


def message_line(err: BaseException) -> str:
    """The first non-empty line of an error's message (a library's multi-line report), else its type's name."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def causes(err: BaseException | None):
    """``err`` and each exception it was raised from or during, innermost last (a cycle is walked once).

    >>> try:
    ...     try:
    ...         raise KeyError("inner")
    ...     except KeyError as inner:
    ...         raise ValueError("outer") from inner
    ... except ValueError as outer:
    ...     [type(e).__name__ for e in causes(outer)]
    ['ValueError', 'KeyError']
    """
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or an exception it was raised from) says the disk or quota is full; TensorFlow and h5py
    report it as their own error types with the OS's message inside."""
    import errno

    for cause in causes(err):
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(cause) or "Disk quota exceeded" in str(cause):
            return True
    return False


def printable(text: str) -> str:
    """``text`` without control characters (a terminal escape sequence in a file name or a recorded reason
    would act on the user's terminal); each is shown as ``?``.

    >>> printable("bad \\x1b[2Jrun\\tdir")
    'bad ?[2Jrun?dir'
    """
    return "".join("?" if (ord(c) < 32 or 127 <= ord(c) < 160) else c for c in text)


def typed(value) -> str:
    """A config value as a user types it: ``null`` for None.

    >>> typed(None), typed(0.5), typed(False)
    ('null', '0.5', 'false')
    """
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)
