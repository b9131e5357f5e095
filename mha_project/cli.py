"""What the scripts share: quiet TensorFlow start-up and one-line errors instead of tracebacks."""

from __future__ import annotations

import os
import sys

# Before TensorFlow is imported anywhere: keep its C++ start-up chatter out of the user's terminal.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def fail(message: str, code: int = 2) -> "NoReturn":  # noqa: F821
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)
