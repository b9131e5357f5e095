"""Atomic writes: a crash never leaves a half-written result file (temp file + rename)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path


def write_text_atomic(path: os.PathLike, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, new_file_mode(path))  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: os.PathLike, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def _jsonable(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def new_file_mode(path: os.PathLike) -> int:
    """The mode a file written over ``path`` gets: the replaced file's own (a private file stays private), or
    for a new file what ``open`` would give it (0666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replaced_atomically(path: os.PathLike):
    """A temporary path beside ``path`` for a writer that takes a path (Keras's saves, a SavedModel's folder):
    ``.tmp-<name>``, so a writer that reads the suffix sees the real one. When the block ends it replaces
    ``path`` (a file with the mode :func:`new_file_mode` gives it, a folder whole); if the block raises it is
    removed, and ``path`` stays as it was."""
    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}")
    _remove(tmp)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmp
        if tmp.is_file():
            os.chmod(tmp, new_file_mode(path))
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)  # a complete folder replaces an older one
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)  # a half-written file only takes space (a full disk's)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
