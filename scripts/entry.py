"""What the entry points beside this file share (it is no command itself): the library only raises; here an
error the user can fix becomes one line on stderr and an exit status, never a traceback.

A script imports it as ``from entry import fail, run_hydra_app``: Python puts a script's own folder first on
``sys.path``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
from typing import NoReturn

from mha_project.errors import CommandFailed, UserError, printable
from mha_project.quiet import import_tensorflow_quietly

__all__ = ["fail", "free_port", "import_tensorflow_quietly", "run_hydra_app"]


def fail(message: str, code: int = 2) -> NoReturn:
    """``error: <message>`` on stderr, then exit with ``code`` (2: a bad value, as argparse exits)."""
    print(f"error: {printable(message)}", file=sys.stderr)
    raise SystemExit(code)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS's choice of an unused one)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Command-line choices that need a package outside the base install, and the module that must import.
SWEEP_PLUGINS = {
    "hparams_search=optuna": "optuna",
    "hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
    "hydra/launcher=submitit_local": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=slurm": "hydra_plugins.hydra_submitit_launcher",
}


def missing_sweep_plugin(argv: list[str]) -> str | None:
    """The one line for a sweeper or launcher asked for on the command line but not installed."""
    for arg in argv:
        module = SWEEP_PLUGINS.get(arg)
        if module is not None and importlib.util.find_spec(module) is None:
            return f'{arg} needs a package that is not installed ({module}): pip install -e ".[sweep]"'
    return None


def run_hydra_app(main) -> None:
    """Run a ``@hydra.main`` function. A UserError from anywhere in it (the config check in Hydra's callback, a
    sweeper's study, ``train`` itself: ``CommandFailed`` through Hydra) is one line and its ``exit_code``; so is
    a command line Hydra cannot compose (``heads=abc``, ``data=nope``), instead of Hydra's several lines.

    ``HYDRA_FULL_ERROR=1`` makes Hydra raise instead of printing its own report: the error is then ours to
    print. Anything that is neither a UserError nor a Hydra or OmegaConf error keeps its full traceback.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    # A log file on a full disk must not print a traceback per line: the run's one error line says what happened.
    logging.raiseExceptions = False
    missing = missing_sweep_plugin(sys.argv[1:])
    if missing:
        fail(missing)
    try:
        main()
    except CommandFailed as failed:  # a UserError Hydra let through (a callback's, a single run's)
        fail(str(failed.error), failed.error.exit_code)
    except UserError as err:  # a sweeper's, raised outside any job (a study that cannot be opened)
        fail(str(err), err.exit_code)
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
