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
import shlex
import sys
from pathlib import Path
from typing import NoReturn

from mha_project.attention import ATTENTION_PLUGIN
from mha_project.errors import CommandFailed, UserError, printable
from mha_project.quiet import import_tensorflow_quietly

__all__ = ["end_within", "fail", "free_port", "import_tensorflow_quietly", "report_run", "run_hydra_app"]


def fail(message: str, code: int = 2) -> NoReturn:
    """``error: <message>`` on stderr, then exit with ``code`` (2: a bad value, as argparse exits)."""
    print(f"error: {printable(message)}", file=sys.stderr)
    raise SystemExit(code)


_wakeup = None  # end_within's descriptor


def end_within(grace: float) -> None:
    """After Ctrl-C or SIGTERM, end the process within ``grace`` seconds even when its main thread is stuck in
    a library call that does not return (a collective whose peer process died): Python runs a signal handler
    only between two bytecodes of the main thread. The signal's number reaches a watcher thread through
    ``signal.set_wakeup_fd``; a process that stops in time never hears from it. Call it after the handlers."""
    import signal
    import threading
    import time

    global _wakeup
    if _wakeup is not None:  # one watcher a process (the tests run the scripts in theirs, again and again)
        signal.set_wakeup_fd(_wakeup, warn_on_full_buffer=False)
        return
    read_end, _wakeup = os.pipe()
    os.set_blocking(_wakeup, False)
    signal.set_wakeup_fd(_wakeup, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            signum = os.read(read_end, 1)[0]
            if signum in (signal.SIGINT, signal.SIGTERM):
                time.sleep(grace)
                name = signal.Signals(signum).name
                print(f"error: stopped by {name}: a library call did not return within {grace:g} s", file=sys.stderr)
                sys.stderr.flush()
                os._exit(128 + signum)

    threading.Thread(target=watch, name="end-within", daemon=True).start()


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
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    # A log file on a full disk must not print a traceback per line: the run's one error line says what happened.
    logging.raiseExceptions = False
    missing = missing_sweep_plugin(sys.argv[1:])
    if missing:
        fail(missing)
    try:
        main()
    except KeyboardInterrupt:  # a stop signal outside a run (composing, loading TensorFlow, between sweep jobs)
        fail("interrupted", 130)
    except CommandFailed as failed:  # a UserError Hydra let through (a callback's, a single run's)
        fail(str(failed.error), failed.error.exit_code)
    except UserError as err:  # a sweeper's, raised outside any job (a study that cannot be opened)
        fail(str(err), err.exit_code)
    except (HydraException, OmegaConfBaseException) as err:
        from mha_project.config import not_a_setting

        overridden = re.match(r"Could not override '([^']+)'", str(err))
        if overridden:  # a key that is no setting: Hydra would advise `+key=value`, which is refused next
            fail(not_a_setting(overridden.group(1)))
        # A config file that sets a key the options chosen beside it lack (experiment=wide_deep's bag C, the mean bag):
        # Hydra names the file, the OmegaConf error it caught the key.
        in_file, lacked = re.match(r"In '([^']+)'", str(err)), err.__context__
        if in_file and isinstance(lacked, ConfigKeyError) and lacked.full_key:
            fail(f"{in_file.group(1)}: {not_a_setting(lacked.full_key)}")
        fail(one_line(err))
    except ValueError as err:
        if not raised_by_hydra(err):
            raise
        nulled = [a for a in sys.argv[1:] if "/" in a.split("=", 1)[0] and a.endswith("=null")]
        if nulled:  # Hydra's own words are "Config group override must be a string or a list. Got NoneType"
            key = nulled[0].split("=", 1)[0]
            fail(
                f"{nulled[0]} is invalid: a config group takes an option's name (`{key}=none` where the group has one)"
            )
        fail(one_line(err))


def raised_by_hydra(err: BaseException) -> bool:
    """Whether ``err`` was raised inside Hydra (composing the config), not by the job."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "/hydra/" in tb.tb_frame.f_code.co_filename


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


def next_steps(run_dir: Path, attention: bool = True) -> str:
    """What a learner can do with the finished run, its path quoted for a shell where needed; the attention
    tool only for a model that has attention."""
    where = shlex.quote(str(run_dir))
    steps = [f"python scripts/evaluate.py {where}", f"tensorboard --logdir {where}"]
    if attention:
        steps.insert(1, f'python scripts/inspect_attention.py {where} "a sentence of your own"')
        steps[-1] += f"   # then the Attention tab: http://localhost:6006/#{ATTENTION_PLUGIN}"
    return "next:\n  " + "\n  ".join(steps)


def report_run(run_dir: Path, metrics: dict, finished_before: bool, attention: bool, rose_after=None) -> None:
    """A training run's last lines: where it is, its test accuracy, which epoch was tested and why training
    stopped. ``rose_after``: the epoch after which validation loss rose (history.csv), said as what was seen."""
    log = logging.getLogger("mha_project.training.train")
    if not finished_before:
        log.info(next_steps(run_dir, attention))
    done = " (already finished; nothing was changed)" if finished_before else ""
    seconds = "" if finished_before else f", {metrics['train_seconds']:.1f}s"
    epochs = metrics["epochs_run"]
    log.info(f"run dir: {run_dir}{done}")
    log.info(
        f"test accuracy: {metrics['test_accuracy']:.4f}  (best val accuracy {metrics['best_val_accuracy']:.4f}, "
        f"{epochs} epoch{'' if epochs == 1 else 's'}{seconds})"
    )
    monitor = metrics["monitor"].replace("_", " ")
    line = f"tested epoch {metrics['best_epoch']}'s weights (the best {monitor})"
    planned = metrics["hparams"]["epochs"]
    if metrics["stopped_early"]:
        line += (
            f"; early stopping ended training after epoch {epochs} of {planned}: {monitor} had not improved for "
            "trainer.early_stopping_patience epochs"
        )
    else:
        line += f"; trained all {planned} epochs" if planned > 1 else "; trained its one epoch"
    if rose_after is not None:
        line += (
            f"; validation loss was lowest after epoch {rose_after} and rose after it while training accuracy "
            f"reached {metrics['last_train_accuracy']:.2f}"
        )
    log.info(line)
