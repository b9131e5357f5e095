"""The table formats ``data=table`` reads, by extension; standard library only (the config check reads it)."""

from pathlib import Path

from mha_project.errors import ConfigError

# The file's extension -> its format (pandas' readers; Parquet through pyarrow).
TABLE_FORMATS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
PARQUET_EXTRA = 'Parquet needs pyarrow: pip install -e ".[table]"'


def table_format(path, key: str = "data.path") -> str:
    """The format a table file's extension names; a one-line error for any other extension."""
    suffix = Path(str(path)).suffix.lower()
    if suffix not in TABLE_FORMATS:
        raise ConfigError(
            f"{key}={path} is not a table this project reads: its extension must be one of "
            f"{', '.join(TABLE_FORMATS)} (CSV, TSV, JSON lines, Parquet)"
        )
    return TABLE_FORMATS[suffix]
