"""Label a file of texts with a finished run: every input row, in order, with ``predicted_class`` and one
``prob_<class>`` column per class, streamed in batches through the run's own tokenisation (``Run.token_ids``,
the ids training made) and written to a temporary file that is renamed into place when every row is done."""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mha_project.data.pipeline import encode
from mha_project.data.tables import TABLE_FORMATS, table_chunks
from mha_project.errors import UserError

OUTPUT_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
READ_ROWS = 4096  # rows read, predicted and written at a time


def input_format(path: str) -> str:
    """``text`` (one text a line; ``-`` is standard input) or the table format its extension names."""
    if path == "-":
        return "text"
    return TABLE_FORMATS.get(Path(path).suffix.lower(), "text")


def output_format(out: str | None, source_format: str) -> str:
    """``--out``'s format by its extension; without ``--out``, the input's (CSV for plain text and Parquet:
    standard output carries text)."""
    if out is None:
        return {"text": "csv", "parquet": "csv"}.get(source_format, source_format)
    suffix = Path(out).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise UserError(f"--out={out} has no output format: its extension must be one of {', '.join(OUTPUT_FORMATS)}")
    return OUTPUT_FORMATS[suffix]


def read_rows(path: str, fmt: str, text_column: str):
    """Chunks of ``(rows, texts)``: the input's rows as dicts (all their columns) and each row's text (None
    where a table row has none)."""
    if fmt == "text":
        yield from _text_lines(path)
        return
    if not Path(path).is_file():
        raise UserError(f"{path} is not a file")
    for chunk in table_chunks(path, fmt, path, rows=READ_ROWS):
        if text_column not in chunk.columns:
            raise UserError(
                f"{path} has no column {text_column!r} (its columns: {', '.join(map(str, chunk.columns))}); "
                "name it with --text-column"
            )
        texts = [None if _missing(v) else str(v) for v in chunk[text_column].tolist()]
        yield chunk.to_dict("records"), texts


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _text_lines(path: str):
    stream = sys.stdin.buffer if path == "-" else None
    if stream is None:
        if not Path(path).is_file():
            raise UserError(f"{path} is not a file")
        stream = open(path, "rb")  # noqa: SIM115 (closed below)
    rows, texts = [], []
    try:
        for number, raw in enumerate(stream, start=1):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise UserError(f"{path}: line {number} is not UTF-8 text ({err.reason} at byte {err.start})") from None
            rows.append({"text": text})
            texts.append(text)
            if len(texts) == READ_ROWS:
                yield rows, texts
                rows, texts = [], []
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if texts:
        yield rows, texts


class _Writer:
    """Rows into a temporary file beside ``out`` (or standard output), renamed into place by ``commit``."""

    def __init__(self, out: str | None, fmt: str, columns_after: list[str]):
        self.out, self.fmt, self.extra = out, fmt, columns_after
        self.columns, self.parquet, self.header_written = None, None, False
        if out is None:
            self.tmp, self.stream = None, sys.stdout
            return
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        self.stream = os.fdopen(fd, "wb" if fmt == "parquet" else "w", newline="" if fmt != "parquet" else None)

    def write(self, rows: list[dict]) -> None:
        if self.columns is None:
            self.columns = [c for c in rows[0] if c not in self.extra] + self.extra
        if self.fmt == "jsonl":
            for row in rows:
                self.stream.write(json.dumps({c: _plain(row.get(c)) for c in self.columns}, ensure_ascii=False) + "\n")
        elif self.fmt == "parquet":
            import pandas as pd
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(pd.DataFrame(rows, columns=self.columns), preserve_index=False)
            if self.parquet is None:
                self.parquet = pq.ParquetWriter(self.stream, table.schema)
            self.parquet.write_table(table)
        else:
            writer = csv.DictWriter(self.stream, self.columns, delimiter="," if self.fmt == "csv" else "\t")
            if not self.header_written:
                writer.writeheader()
                self.header_written = True
            writer.writerows({c: _plain(row.get(c)) for c in self.columns} for row in rows)

    def commit(self) -> None:
        if self.parquet is not None:
            self.parquet.close()
        if self.tmp is None:
            self.stream.flush()
            return
        self.stream.close()
        os.chmod(self.tmp, 0o644)
        os.replace(self.tmp, self.out)

    def discard(self) -> None:
        if self.tmp is not None:
            self.stream.close()
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def predict_file(
    run, source: str, out: str | None = None, text_column: str = "text", batch_size: int = 256, progress=None
) -> dict:
    """Predict every row of ``source`` with ``run`` (a :class:`~mha_project.analysis.runs.Run`) and write them
    to ``out`` (standard output when None). ``progress(rows, seconds)`` is called after each chunk. Returns
    the rows written, those without a text, and the rows per second."""
    fmt = input_format(source)
    probability_columns = [f"prob_{name}" for name in run.class_names]
    writer = _Writer(out, output_format(out, fmt), ["predicted_class", *probability_columns])
    start, written, without_text = time.perf_counter(), 0, 0
    try:
        for rows, texts in read_rows(source, fmt, text_column):
            if not rows:
                continue
            present = [i for i, text in enumerate(texts) if text is not None]
            probs = np.full((len(rows), len(run.class_names)), np.nan)
            for chosen, ids in _batches(run, [texts[i] for i in present], present, batch_size):
                probs[chosen] = np.asarray(run.model.predict_on_batch(ids), dtype="float64")
            for i, row in enumerate(rows):
                if texts[i] is None:
                    row["predicted_class"] = None
                else:
                    row["predicted_class"] = run.class_names[int(np.argmax(probs[i]))]
                row.update({c: (None if texts[i] is None else float(p)) for c, p in zip(probability_columns, probs[i])})
            without_text += len(rows) - len(present)
            writer.write(rows)
            written += len(rows)
            if progress is not None:
                progress(written, time.perf_counter() - start)
        if not written:
            raise UserError(f"{source} has no rows to predict")
        writer.commit()
    except BaseException:
        writer.discard()
        raise
    seconds = time.perf_counter() - start
    return {"rows": written, "without_text": without_text, "rows_per_second": written / max(seconds, 1e-9)}


def _batches(run, texts: list[str], rows: list[int], batch_size: int):
    """``(rows, token ids)`` batches of the run's own ids (``encode``, as ``Run.token_ids``), texts of similar
    length together and each batch padded to a multiple of 32 tokens: padding is masked, so the probabilities
    are the same, and the model sees a few shapes instead of one per batch."""
    encoded = encode(texts, run.vectorizer, run.seq_len, run.truncation)
    order = np.argsort([len(ids) for ids in encoded], kind="stable")
    for begin in range(0, len(order), batch_size):
        chosen = order[begin : begin + batch_size]
        width = max(1, max(len(encoded[k]) for k in chosen))
        ids = np.zeros((len(chosen), min(-(-width // 32) * 32, max(run.seq_len, width))), "int32")
        for row, k in enumerate(chosen):
            ids[row, : len(encoded[k])] = encoded[k]
        yield [rows[k] for k in chosen], ids


def progress_bar(stream=sys.stderr):
    """A one-line progress report with rows per second on a terminal; nothing when ``stream`` is piped."""
    if not stream.isatty():
        return None

    def show(rows: int, seconds: float) -> None:
        stream.write(f"\r{rows:,} rows · {rows / max(seconds, 1e-9):,.0f} rows/s")
        stream.flush()

    return show
