"""Where ``scripts/predict.py`` writes: the checks on ``--out`` before anything is read, and the writer that
streams rows into a temporary file beside it and renames that into place when every row is done. No
TensorFlow here: the command's signal handler reads :data:`CRITICAL`."""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mha_project.atomic import new_file_mode
from mha_project.errors import UserError, message_line

OUTPUT_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
# Where a stop signal must wait: between creating the temporary file and noting its name, while it is renamed
# into place, and while the model runs. scripts/predict.py's handler raises at once elsewhere (start-up, a
# wait on standard input) and, in here, when it ends.
CRITICAL = {"depth": 0, "pending": None}


@contextmanager
def uninterrupted():
    CRITICAL["depth"] += 1
    try:
        yield
    finally:
        CRITICAL["depth"] -= 1
    if CRITICAL["depth"] == 0 and CRITICAL["pending"] is not None:
        raise KeyboardInterrupt


def output_format(out: str | None, source_format: str) -> str:
    """``--out``'s format by its extension; without ``--out``, the input's (CSV for plain text and Parquet:
    standard output carries text)."""
    if out is None:
        return {"text": "csv", "parquet": "csv"}.get(source_format, source_format)
    suffix = Path(out).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise UserError(f"--out={out} has no output format: its extension must be one of {', '.join(OUTPUT_FORMATS)}")
    return OUTPUT_FORMATS[suffix]


def check_paths(source: str, out: str | None) -> None:
    """Refuse, before anything is read or written: an input that is not a readable file, and an ``--out`` that
    is the input however the input arrives (a path, ``-``, ``/dev/stdin``, a link: compared by device and inode),
    a directory, a read-only file, a file in a run directory (the run's own record) or in no writable folder."""
    if source != "-" and not Path(source).is_file():
        raise UserError(f"{source} is not a file")
    if out is None:
        return
    target = Path(out)
    if target.is_dir():
        raise UserError(f"--out={out} is a directory: name a file to write the predictions to")
    given = _identity(sys.stdin.fileno()) if source == "-" else _identity(source)
    if given is not None and given == _identity(out):
        raise UserError(f"--out={out} is the input: the predictions would replace it; name another file")
    if target.exists() and not target.stat().st_mode & 0o222:
        raise UserError(f"--out={out} is read-only (mode {target.stat().st_mode & 0o777:04o}); name another file")
    for folder in target.resolve().parents:
        if (folder / "run.json").is_file():
            raise UserError(f"--out={out} is inside the run directory {folder}, which is the run's own record")
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--out={out} cannot be written: {folder} is not a folder this user can write to")


def _identity(file) -> tuple[int, int] | None:
    """A file's (device, inode), from a path or an open descriptor; None when there is no such file."""
    try:
        st = os.fstat(file) if isinstance(file, int) else os.stat(file)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Writer:
    """Rows into a temporary file beside ``out`` (or standard output), renamed into place by ``commit``; every
    row written with ``columns`` (one Parquet ``schema`` for the whole file)."""

    def __init__(self, out: str | None, fmt: str, columns: list[str], schema=None):
        self.out, self.fmt, self.columns, self.schema = out, fmt, columns, schema
        self.parquet, self.written = None, 0  # rows written so far
        if out is None:
            self.tmp, self.stream = None, sys.stdout
            return
        target, self.tmp = Path(out), None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with uninterrupted():
                fd, self.tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        except KeyboardInterrupt:  # a signal while it was made: raised once its name is known
            if self.tmp is not None:
                os.close(fd)
                os.unlink(self.tmp)
            raise
        except OSError as err:
            raise UserError(f"--out={out} cannot be written: {err.strerror} ({err.filename})") from None
        self.mode = new_file_mode(target)  # before anything replaces it: a private file stays private
        self.stream = os.fdopen(fd, "wb" if fmt == "parquet" else "w", newline="" if fmt != "parquet" else None)

    def write(self, rows: list[dict]) -> None:
        if self.fmt == "jsonl":
            for row in rows:
                self.stream.write(json.dumps({c: _plain(row.get(c)) for c in self.columns}, ensure_ascii=False) + "\n")
        elif self.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            if self.parquet is None:
                self.parquet = pq.ParquetWriter(self.stream, self.schema)
            fields = [(c, self.schema.field(c).type) for c in self.columns]
            records = [{c: _arrow_value(row.get(c), kind) for c, kind in fields} for row in rows]
            try:
                table = pa.Table.from_pylist(records, schema=self.schema)
            except (OverflowError, pa.ArrowException) as err:
                raise UserError(f"{self.out}: {_unfit(records, fields, self.written)} ({message_line(err)})") from None
            self.parquet.write_table(table)
        else:
            writer = csv.DictWriter(self.stream, self.columns, delimiter="," if self.fmt == "csv" else "\t")
            if not self.written:
                writer.writeheader()
            writer.writerows({c: _cell(row.get(c)) for c in self.columns} for row in rows)
        self.written += len(rows)

    def commit(self) -> None:
        if self.parquet is not None:
            self.parquet.close()
        if self.tmp is None:
            self.stream.flush()
            return
        self.stream.close()
        with uninterrupted():
            os.chmod(self.tmp, self.mode)
            os.replace(self.tmp, self.out)
            self.tmp = None

    def discard(self) -> None:
        if self.parquet is not None:
            self.parquet.close()  # before its file: a writer left open would write to it when collected
        if self.tmp is not None:
            self.stream.close()
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


def _cell(value):
    """A CSV/TSV cell: a JSON object or list as JSON (not Python's repr), anything else as it is."""
    value = _plain(value)
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else value


def _unfit(records: list[dict], fields, first_row: int) -> str:
    """Which row (1-based, of the input) and column hold a value the Parquet column type cannot hold."""
    import pyarrow as pa

    for i, record in enumerate(records):
        for column, kind in fields:
            try:
                pa.array([record[column]], type=kind)
            except (OverflowError, pa.ArrowException):
                return f"row {first_row + i + 1}, column {column!r}: {record[column]!r} does not fit Parquet's {kind}"
    return "a value does not fit its Parquet column"


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def _arrow_value(value, kind):
    """``value`` as the output schema's column type holds it (text for a JSON column of several types)."""
    import pyarrow as pa

    value = _plain(value)
    if value is None:
        return None
    if pa.types.is_string(kind) and not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)
    if pa.types.is_floating(kind) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
