"""What the scripts share: one-line errors instead of tracebacks (TensorFlow is quieted in __init__)."""

from __future__ import annotations

import sys
from typing import NoReturn


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)
