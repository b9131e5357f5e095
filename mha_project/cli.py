"""What the scripts share: one-line errors instead of tracebacks (TensorFlow is quieted in __init__)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import NoReturn


def finish_all(processes, timeout: float) -> list[tuple[int, str]]:
    """Each started process's exit status and output (text: stdout, and stderr if it is kept apart),
    waiting at most ``timeout`` seconds for each; one that takes longer is killed."""
    results = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        results.append((process.returncode, (out or "") + (err or "")))
    return results


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


# Overrides renamed in the schema: the old name keeps working, with one line saying so.
RENAMED_KEYS = {"pretrain.from": "pretrain.from_run"}


def renamed_overrides(argv: list[str]) -> list[str]:
    """``argv`` with the renamed keys' new names (``pretrain.from=R`` -> ``pretrain.from_run=R``)."""
    out = []
    for arg in argv:
        for old, new in RENAMED_KEYS.items():
            if arg.startswith(old + "="):
                print(f"note: {old} is now called {new}; {old} still works for now", file=sys.stderr)
                arg = new + arg[len(old) :]
        out.append(arg)
    return out


def run_hydra_app(main) -> None:
    """Run a ``@hydra.main`` function; a command line Hydra cannot compose (``heads=abc``, ``data=nope``) is one
    line and exit 2, like every other bad value, instead of Hydra's several lines and exit 1.

    Hydra prints its own report unless ``HYDRA_FULL_ERROR=1``, which makes it raise instead: the error is then
    ours to print. Anything that is not a Hydra or OmegaConf error keeps its full traceback.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    sys.argv[1:] = renamed_overrides(sys.argv[1:])
    try:
        main()
    except (HydraException, OmegaConfBaseException) as err:
        fail(one_line(err))


def one_line(err: BaseException) -> str:
    """Hydra's multi-line message (and the first line of its cause) as one line; a list of options after a
    line ending in ':' is joined with commas.

    >>> one_line(ValueError("Could not find 'data/nope'\\n\\nAvailable options in 'data':\\n\\tfolder\\n\\timdb"))
    "Could not find 'data/nope'; Available options in 'data': folder, imdb"
    """
    message = str(err).split("Config search path:")[0]  # where Hydra looked: not news to the user
    parts = [line.strip() for line in message.splitlines() if line.strip()]
    if err.__cause__ is not None and str(err.__cause__).strip():
        parts.append(str(err.__cause__).strip().splitlines()[0])
    out, listing = (parts or [type(err).__name__])[0], False
    for part in parts[1:]:
        out += (" " if out.endswith(":") else ", ") + part if listing else "; " + part
        listing = listing or part.endswith(":")
    return out
