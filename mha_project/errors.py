"""User-facing errors: the CLI prints them as one line (no traceback) and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix: a bad value, a missing file, a run that diverged."""


class RunDirRefused(UserError):
    """The run directory holds another run, or another process is using it: it must not be written."""


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


def printable(text: str) -> str:
    """``text`` without control characters (a terminal escape sequence in a file name or a recorded reason
    would act on the user's terminal); each is shown as ``?``.

    >>> printable("bad \\x1b[2Jrun\\tdir")
    'bad ?[2Jrun?dir'
    """
    return "".join("?" if (ord(c) < 32 or 127 <= ord(c) < 160) else c for c in text)


def typed(value) -> str:
    """A config value as a user types it: ``null`` for None.

    >>> typed(None), typed(0.5)
    ('null', '0.5')
    """
    return "null" if value is None else str(value)
