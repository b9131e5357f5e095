"""How the reports write counts, values and tables (the sweep report, the Optuna section, the predictions)."""

from __future__ import annotations


def plural(count, noun: str) -> str:
    """``1 epoch``, ``4 epochs``, ``0.5 epochs``: a count and its noun as a person writes them.

    >>> plural(1, "epoch"), plural(4, "row"), plural(1.5, "epoch")
    ('1 epoch', '4 rows', '1.5 epochs')
    """
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def shown(value) -> str:
    """A value as logs and tables show it: a float to 4 significant digits (a swept ``dropout`` of
    0.3005575058716044 reads 0.3006; the trial trains with the exact value), anything else as it is.

    >>> shown(0.3005575058716044), shown(0.0005), shown(8), shown(True)
    ('0.3006', '0.0005', '8', 'true')
    """
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def cell(value) -> str:
    """A value as the report's tables show it (a float to 4 decimals, None as an empty cell)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if value < 10 else f"{value:.1f}"
    return str(value)


def markdown(header, rows) -> str:
    """A Markdown table of strings (a ``|`` inside a cell becomes ``/``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(text.replace("|", "/") for text in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
