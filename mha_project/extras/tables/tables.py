"""Texts and labels from a table file (``data=table``): CSV, TSV, JSON lines or Parquet, read by pandas /
pyarrow in chunks of the two columns a run needs, so a large file is never held whole with its other columns."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mha_project.errors import ConfigError, UserError, message_line
from mha_project.extras.tables.formats import PARQUET_EXTRA, TABLE_FORMATS, table_format  # noqa: F401

log = logging.getLogger(__name__)
CHUNK_ROWS = 65536


class TableTexts(Sequence):
    """A table's texts, each stored once (a NumPy array of Python strings; a split is a view of indices into
    it, not a copy of the texts), fed to tf.data in chunks so the pipeline holds no second copy of them all."""

    def __init__(self, texts: np.ndarray):
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index):
        found = self.texts[index]
        return list(found) if isinstance(index, slice) else str(found)

    def __iter__(self):
        return iter(self.texts)

    def subset(self, indices) -> TableTexts:
        return TableTexts(self.texts[np.asarray(indices, dtype=np.int64)])

    def dataset(self):
        import tensorflow as tf

        def chunks():
            for begin in range(0, len(self.texts), 4096):
                yield self.texts[begin : begin + 4096].astype(object)

        spec = tf.TensorSpec(shape=(None,), dtype=tf.string)
        return tf.data.Dataset.from_generator(chunks, output_signature=spec).unbatch()

    def __add__(self, other) -> list[str]:
        return list(self) + list(other)


def read_table(path, text_column: str, label_column: str | None, key: str = "data.path"):
    """``(texts, labels)`` of the table at ``path``: the text column as :class:`TableTexts`, the label column
    as strings (``None`` when ``label_column`` is ``None``). Rows missing either are dropped, with one notice."""
    path = Path(str(path))
    fmt = table_format(path, key)
    if not path.is_file():
        raise ConfigError(f"{key}={path} is not a file")
    columns = [text_column] + ([label_column] if label_column is not None else [])
    texts, labels, dropped, rows = [], [], 0, 0
    for chunk in table_chunks(path, fmt, f"{key}={path}", columns, rows=CHUNK_ROWS):
        missing = [c for c in columns if c not in chunk.columns]
        if missing:
            names = _column_names(path, fmt)
            raise ConfigError(
                f"{key}={path} has no column {missing[0]!r} (its columns: {', '.join(map(str, names))}); "
                f"name the right one with data.{'text' if missing[0] == text_column else 'label'}_column=..."
            )
        rows += len(chunk)
        keep = chunk[columns].notna().all(axis=1)
        if label_column is not None:
            keep &= chunk[label_column].astype(str).str.strip() != ""
        dropped += int((~keep).sum())
        chunk = chunk[keep]
        not_text = next((v for v in chunk[text_column] if not isinstance(v, str)), None)
        if not_text is not None and not isinstance(not_text, (int, float, np.number)):
            raise ConfigError(
                f"{key}={path}: column {text_column!r} holds {type(not_text).__name__} values such as "
                f"{str(not_text)[:60]!r}, not texts; name a column of strings with data.text_column=..."
            )
        texts.append(chunk[text_column].astype(str).to_numpy(dtype=object))
        if label_column is not None:
            labels.append(chunk[label_column].to_numpy())
    if dropped:
        log.warning(f"{path}: {dropped} of {rows} rows dropped: their text or label is missing")
    texts = np.concatenate(texts) if texts else np.zeros(0, dtype=object)
    if not len(texts):
        raise ConfigError(f"{key}={path} has no rows with both a text and a label")
    return TableTexts(texts), (_label_strings(np.concatenate(labels)) if label_column is not None else None)


def _label_strings(values: np.ndarray) -> np.ndarray:
    """Labels as strings, decided once for the whole column: when every label is a number (a CSV's ``1``,
    ``1.0`` and ``01`` alike), one name per number: integer names (``1``, not ``1.0``) when every label is a
    whole number, else Python's float spelling; otherwise each label as the file spells it."""
    numbers = []
    for value in values:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return np.asarray([str(v) for v in values], dtype=object)
        if isinstance(value, bool) or not np.isfinite(number):
            return np.asarray([str(v) for v in values], dtype=object)
        numbers.append(number)
    whole = all(n.is_integer() for n in numbers)
    return np.asarray([str(int(n)) if whole else repr(n) for n in numbers], dtype=object)


def class_names_of(labels: np.ndarray) -> list[str]:
    """Sorted class names: numerically when every label is an integer (``2`` before ``10``), else as text."""
    names = sorted(set(labels.tolist()))
    try:
        return sorted(names, key=int)
    except ValueError:
        return names


def _column_names(path: Path, fmt: str) -> list:
    import pandas as pd

    if fmt in ("csv", "tsv"):
        return list(pd.read_csv(path, sep="," if fmt == "csv" else "\t", nrows=0).columns)
    if fmt == "jsonl":
        return list(next(iter(pd.read_json(path, lines=True, chunksize=1))).columns)
    import pyarrow.parquet as pq

    return list(pq.ParquetFile(path).schema_arrow.names)


def table_chunks(path, fmt: str, name: str, columns: list[str] | None = None, rows: int = CHUNK_ROWS):
    """DataFrames of ``rows`` rows of the table at ``path`` in ``fmt``, only ``columns`` when given (a missing
    one is absent from every chunk); ``name`` names the file in the one-line error for a file that cannot be
    parsed. What ``data=table`` and ``scripts/predict.py`` read tables with."""
    import pandas as pd

    try:
        if fmt in ("csv", "tsv"):
            yield from pd.read_csv(
                path,
                sep="," if fmt == "csv" else "\t",
                usecols=None if columns is None else (lambda column: column in columns),
                chunksize=rows,
                dtype=str,
                keep_default_na=False,
                na_values=[""],
            )
        elif fmt == "jsonl":
            for chunk in pd.read_json(path, lines=True, chunksize=rows, dtype=False):
                yield chunk if columns is None else chunk[[c for c in chunk.columns if c in columns]]
        else:
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise ConfigError(f"{name}: {PARQUET_EXTRA}") from None
            table = pq.ParquetFile(path)
            wanted = None if columns is None else [c for c in columns if c in table.schema_arrow.names]
            if columns is not None and len(wanted) < len(columns):
                yield pd.DataFrame(columns=wanted)  # the caller names the missing column
                return
            for batch in table.iter_batches(batch_size=rows, columns=wanted):
                yield batch.to_pandas()
    except UserError:
        raise
    except Exception as err:  # pandas' and pyarrow's parser errors come in several types
        raise ConfigError(f"{name} cannot be read as {fmt.upper()}: {message_line(err)}") from None


def same_file(a, b) -> bool:
    """Whether two paths name one file (by inode: links and other spellings too); False when either is missing."""
    try:
        return Path(str(a)).samefile(str(b))
    except OSError:
        return False


def load_table_splits(data_cfg, seed: int):
    """``data=table``'s train and test splits (texts, integer labels) and class names: ``data.test_path``'s
    rows as the test split, or a seeded, stratified ``data.test_fraction`` of ``data.path``'s."""
    if data_cfg.text_column == data_cfg.label_column:
        raise ConfigError(
            f"data.text_column={data_cfg.text_column} is data.label_column too: a model would learn the label "
            "from itself; name the text and the label columns"
        )
    if data_cfg.test_path is not None and same_file(data_cfg.test_path, data_cfg.path):
        raise ConfigError(
            f"data.test_path={data_cfg.test_path} is data.path: the test would score the training rows; give "
            "a file of other rows, or leave data.test_path out to hold back data.test_fraction of data.path"
        )
    texts, labels = read_table(data_cfg.path, data_cfg.text_column, data_cfg.label_column)
    class_names = class_names_of(labels)
    index = {name: i for i, name in enumerate(class_names)}
    ids = np.array([index[name] for name in labels], "int32")
    if data_cfg.test_path is not None:
        test_texts, test_labels = read_table(
            data_cfg.test_path, data_cfg.text_column, data_cfg.label_column, key="data.test_path"
        )
        unknown = sorted(set(test_labels.tolist()) - set(class_names))
        if unknown:
            raise ConfigError(
                f"data.test_path={data_cfg.test_path} has label {unknown[0]!r}, which data.path={data_cfg.path} "
                f"never has: its classes are {', '.join(class_names)}"
            )
        return (texts, ids), (test_texts, np.array([index[name] for name in test_labels], "int32")), class_names
    # A seeded, stratified share of each class for the test split (its own stream: the validation split
    # below draws from the seed as for every dataset).
    rng = np.random.default_rng([seed, 1])
    test = np.zeros(len(ids), bool)
    for label in range(len(class_names)):
        rows = np.flatnonzero(ids == label)
        test[rng.permutation(rows)[: int(round(len(rows) * data_cfg.test_fraction))]] = True
    if test.all() or not test.any():
        raise ConfigError(
            f"data.test_fraction={data_cfg.test_fraction} leaves {'no training' if test.all() else 'no test'} rows "
            f"of the {len(ids)} in data.path={data_cfg.path}; change it or give data.test_path"
        )
    keep, held = np.flatnonzero(~test), np.flatnonzero(test)
    return (texts.subset(keep), ids[keep]), (texts.subset(held), ids[held]), class_names
