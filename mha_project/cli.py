"""What the scripts share: one-line errors instead of tracebacks, and a quiet TensorFlow start-up."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import NoReturn


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS's choice of an unused one)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and let it look for devices with file descriptor 2 pointed at /dev/null.

    On a CPU machine TensorFlow 2.21 writes start-up lines (oneDNN notices, "Could not find cuda drivers",
    "failed call to cuInit") from C++ through absl, before ``TF_CPP_MIN_LOG_LEVEL`` applies, so only the file
    descriptor can hide them. Each entry point calls this once its arguments are checked, before it imports
    what imports TensorFlow; the library itself never touches fd 2. ``TF_CPP_MIN_LOG_LEVEL=0`` shows them.
    """
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_fd_silenced():
        import tensorflow as tf

        tf.config.list_physical_devices()  # device discovery (and its cuInit line) happens here, not later


@contextlib.contextmanager
def _stderr_fd_silenced():
    """Point fd 2 at /dev/null (C++ writes bypass sys.stderr); restore it even on error."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


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


def fail(message: str, code: int = 2) -> NoReturn:
    from mha_project.errors import printable

    print(f"error: {printable(message)}", file=sys.stderr)
    raise SystemExit(code)


# Command-line choices that need a package from the `sweep` extra, and the module that must import.
SWEEP_PLUGINS = {
    "hparams_search=optuna": "optuna",
    "hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
    "hydra/launcher=submitit_local": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=slurm": "hydra_plugins.hydra_submitit_launcher",
}


def missing_sweep_plugin(argv: list[str]) -> str | None:
    """The one line for a sweeper or launcher asked for on the command line but not installed."""
    import importlib.util

    for arg in argv:
        module = SWEEP_PLUGINS.get(arg)
        if module is not None and importlib.util.find_spec(module) is None:
            return f'{arg} needs a package that is not installed ({module}): pip install -e ".[sweep]"'
    return None


def run_hydra_app(main) -> None:
    """Run a ``@hydra.main`` function; a command line Hydra cannot compose (``heads=abc``, ``data=nope``) is one
    line and exit 2, like every other bad value, instead of Hydra's several lines and exit 1.

    Hydra prints its own report unless ``HYDRA_FULL_ERROR=1``, which makes it raise instead: the error is then
    ours to print. Anything that is not a Hydra or OmegaConf error keeps its full traceback.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from mha_project.errors import UserError

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    missing = missing_sweep_plugin(sys.argv[1:])
    if missing:
        fail(missing)
    try:
        main()
    except UserError as err:  # from a sweeper (a study that cannot be opened), before any job runs
        fail(str(err))
    except (HydraException, OmegaConfBaseException) as err:
        overridden = re.match(r"Could not override '([^']+)'", str(err))
        if overridden:  # a key that is no setting: Hydra would advise `+key=value`, which is refused next
            from mha_project.config import not_a_setting

            fail(not_a_setting(overridden.group(1)))
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
