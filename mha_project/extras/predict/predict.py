"""Label a file of texts with a finished run: every input row, in order, with ``predicted_class`` and one
``prob_<class>`` column per class, streamed in batches through the run's own tokenisation (``Run.token_ids``,
the ids training made) and written to a temporary file that is renamed into place when every row is done."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from mha_project.errors import UserError, message_line
from mha_project.extras.predict.writer import Writer, check_paths, output_format, uninterrupted
from mha_project.extras.tables.tables import PARQUET_EXTRA, TABLE_FORMATS, table_chunks

READ_ROWS = 4096  # rows read, predicted and written at a time


def input_format(path: str) -> str:
    """``text`` (one text a line; ``-`` is standard input) or the table format its extension names."""
    if path == "-":
        return "text"
    return TABLE_FORMATS.get(Path(path).suffix.lower(), "text")


def input_columns(path: str, fmt: str) -> dict[str, set]:
    """Every column of the input, in first-seen order, with the Python types of its JSON values (JSON lines;
    rows may differ, so one pass reads them all) or no types (a plain text file's ``text``, a CSV/TSV header,
    a Parquet schema)."""
    if fmt == "text":
        return {"text": set()}
    if fmt == "jsonl":
        columns: dict[str, set] = {}
        for row in _json_rows(path):
            for name, value in row.items():
                kinds = columns.setdefault(name, set())
                if value is not None:
                    kinds.add(type(value))
        return columns
    if fmt == "parquet":
        return {name: set() for name in _parquet(path).schema_arrow.names}
    return {str(name): set() for name in next(table_chunks(path, fmt, path, rows=1)).columns}


def read_rows(path: str, fmt: str, text_column: str):
    """Chunks of ``(rows, texts)``: the input's rows as dicts, each value as the file holds it (every column of
    the row), and each row's text (None where a table row has none)."""
    if fmt == "text":
        yield from _text_lines(path)
        return
    if fmt == "jsonl":
        chunks = _in_chunks(_json_rows(path))
    elif fmt == "parquet":  # Python values of the file's own types (no pandas float for an int)
        chunks = (batch.to_pylist() for batch in _parquet(path).iter_batches(batch_size=READ_ROWS))
    else:
        chunks = (chunk.to_dict("records") for chunk in table_chunks(path, fmt, path, rows=READ_ROWS))
    done = 0
    for rows in chunks:
        yield rows, _texts(rows, text_column, done)
        done += len(rows)


def _in_chunks(rows):
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == READ_ROWS:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _parquet(path: str):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{path}: {PARQUET_EXTRA}") from None
    try:
        return pq.ParquetFile(path)
    except Exception as err:  # pyarrow's errors for a file that is not Parquet come in several types
        raise UserError(f"{path} cannot be read as PARQUET: {message_line(err)}") from None


def _json_rows(path: str):
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as err:
                    raise UserError(f"{path} cannot be read as JSONL: line {number}: {message_line(err)}") from None
                if not isinstance(row, dict):
                    raise UserError(f"{path}: line {number} is not a JSON object (a row of named columns)")
                yield row
        except UnicodeDecodeError as err:
            raise UserError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def _texts(rows: list[dict], column: str, first_row: int) -> list[str | None]:
    """Each row's text (None where it has none); a value that is not text (a number, a list, an object) is
    refused, naming its row (1-based) and column, rather than predicted from its printed form."""
    texts = []
    for i, row in enumerate(rows):
        value = row.get(column)
        if not _missing(value) and not isinstance(value, str):
            raise UserError(
                f"row {first_row + i + 1}, column {column!r} holds {type(value).__name__} {_short(value)}, not text: "
                "predict reads strings only"
            )
        texts.append(None if _missing(value) else value)
    return texts


def _short(value) -> str:
    text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _text_lines(path: str):
    stream = sys.stdin.buffer if path == "-" else None
    if stream is None:
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


def parquet_schema(source: str, fmt: str, columns: dict[str, set], new_columns: list[str]):
    """One Arrow schema for the whole output: a Parquet input's own types, JSON lines' types as every row
    has them (``columns``, from :func:`input_columns`; a column of several types is written as text), text for
    CSV/TSV and plain text; then ``predicted_class`` (text) and the probabilities (float64)."""
    import pyarrow as pa

    if fmt == "parquet":
        found = _parquet(source).schema_arrow
        fields = [found.field(c) for c in columns]
    elif fmt == "jsonl":
        fields = [pa.field(c, _json_arrow_type(kinds)) for c, kinds in columns.items()]
    else:
        fields = [pa.field(c, pa.string()) for c in columns]
    fields.append(pa.field(new_columns[0], pa.string()))
    fields += [pa.field(c, pa.float64()) for c in new_columns[1:]]
    return pa.schema(fields)


def _json_arrow_type(kinds: set):
    import pyarrow as pa

    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64()
    if kinds and kinds <= {int, float}:
        return pa.float64()
    return pa.string()


def predict_file(
    run, source: str, out: str | None = None, text_column: str = "text", batch_size: int = 256, progress=None
) -> dict:
    """Predict every row of ``source`` with ``run`` (a :class:`~mha_project.extras.analysis.runs.Run`) and write them
    to ``out`` (standard output when None). ``progress(rows, seconds)`` is called after each chunk. Returns
    the rows written, those without a text, and the rows per second."""
    fmt = input_format(source)
    check_paths(source, out)
    out_fmt = output_format(out, fmt)
    probability_columns = [f"prob_{name}" for name in run.class_names]
    new_columns = ["predicted_class", *probability_columns]
    columns = {"text": set()} if source == "-" else input_columns(source, fmt)
    if fmt != "text" and text_column not in columns:
        raise UserError(
            f"{source} has no column {text_column!r} (its columns: {', '.join(map(str, columns))}); "
            "name it with --text-column"
        )
    taken = next((c for c in new_columns if c in columns), None)
    if taken is not None:
        raise UserError(
            f"{source} already has a column {taken!r}, which predict writes ({', '.join(new_columns)}); "
            "rename that column in the input, or predict from a copy without it"
        )
    schema = parquet_schema(source, fmt, columns, new_columns) if out_fmt == "parquet" else None
    writer = Writer(out, out_fmt, [*columns, *new_columns], schema)
    start, without_text = time.perf_counter(), 0
    try:
        for rows, texts in read_rows(source, fmt, text_column):
            if not rows:
                continue
            present = [i for i, text in enumerate(texts) if text is not None]
            probs = np.full((len(rows), len(run.class_names)), np.nan)
            # A stop signal waits for the chunk: raised inside the model's calls, it could land in a tensor's
            # finaliser, where Python prints it and drops it.
            with uninterrupted():
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
            if progress is not None:
                progress(writer.written, time.perf_counter() - start)
        if not writer.written:
            raise UserError(f"{source} has no rows to predict")
        writer.commit()
    except OSError as err:  # a full disk, a folder gone: one line, the temporary file removed
        writer.discard()
        raise UserError(f"{err.filename or out or 'standard output'}: {err.strerror or message_line(err)}") from None
    except BaseException:
        writer.discard()
        raise
    seconds = time.perf_counter() - start
    rows = writer.written
    return {"rows": rows, "without_text": without_text, "rows_per_second": rows / max(seconds, 1e-9)}


def _batches(run, texts: list[str], rows: list[int], batch_size: int):
    """``(rows, token ids)`` batches of the run's own ids (its preprocessor's, as ``Run.token_ids``), texts of similar
    length together and each batch padded to a multiple of 32 tokens: padding is masked, so the probabilities
    are the same, and the model sees a few shapes instead of one per batch."""
    from mha_project.data.pipeline import with_text_inputs  # TensorFlow: this module loads without it

    encoded = run.preprocessor.encode(texts)
    order = np.argsort([len(ids) for ids in encoded], kind="stable")
    for begin in range(0, len(order), batch_size):
        chosen = order[begin : begin + batch_size]
        width = max(1, max(len(encoded[k]) for k in chosen))
        ids = np.zeros((len(chosen), min(-(-width // 32) * 32, max(run.preprocessor.seq_len, width))), "int32")
        for row, k in enumerate(chosen):
            ids[row, : len(encoded[k])] = encoded[k]
        yield [rows[k] for k in chosen], with_text_inputs(run.model, ids, [texts[k] for k in chosen])


def progress_bar(stream=sys.stderr):
    """A one-line progress report with rows per second on a terminal; nothing when ``stream`` is piped."""
    if not stream.isatty():
        return None

    def show(rows: int, seconds: float) -> None:
        stream.write(f"\r{rows:,} rows · {rows / max(seconds, 1e-9):,.0f} rows/s")
        stream.flush()

    return show
