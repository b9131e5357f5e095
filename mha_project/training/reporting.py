"""What a run says when it ends, and the ``latest`` pointer to it."""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
from pathlib import Path

from mha_project.atomic import write_text_atomic
from mha_project.cli import plural
from mha_project.extending import NEXT_STEPS
from mha_project.run_dir import LATEST, latest_target, latest_text
from mha_project.training.failures import describe

log = logging.getLogger("mha_project.training.train")


def point_latest_at(run_dir: Path, in_sweep: bool = False) -> None:
    """``outputs/runs/latest`` (``outputs/debug/latest`` for ``debug=...`` runs): the file naming the last run
    that finished there; never for other run dirs, and never over a ``latest`` that is not the project's."""
    runs = run_dir.resolve().parent
    if runs.name not in ("runs", "debug") or runs.parent.name != "outputs" or in_sweep:
        return
    latest = runs / LATEST
    if (latest.exists() or latest.is_symlink()) and latest_target(latest) is None:
        return  # a folder, link or file of the user's called "latest": left alone
    write_text_atomic(latest, latest_text(run_dir.resolve()))  # a reader sees the old name or the new one


def next_steps(run_dir: Path, attention: bool = True) -> str:
    """What a learner can do with the finished run, with its real path (quoted for a shell where needed);
    the attention tools only for a model that has attention."""
    where = shlex.quote(str(run_dir))
    lines = [f"python scripts/evaluate.py {where}"]
    if attention:
        lines.append(f'python scripts/inspect_attention.py {where} "a sentence of your own"')
    lines += [line for next_step in NEXT_STEPS for line in next_step(run_dir, attention)]  # the extras'
    lines.append(f"tensorboard --logdir {where}")
    return "next:\n  " + "\n  ".join(lines)


def already_finished(run_dir: Path) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    stop_logging_into(run_dir)  # its train.log is part of the record: nothing happened, nothing is added
    log_result(run_dir, metrics, finished_before=True)
    return metrics


def log_result(run_dir: Path, metrics: dict, finished_before: bool = False, overfit_hint: bool = True) -> None:
    log.info(f"run dir: {run_dir}" + (" (already finished; nothing was changed)" if finished_before else ""))
    seconds = "" if finished_before else f", {metrics['train_seconds']:.1f}s"
    log.info(
        f"test accuracy: {metrics['test_accuracy']:.4f}  (best val accuracy {metrics['best_val_accuracy']:.4f}, "
        f"{plural(metrics['epochs_run'], 'epoch')}{seconds})"
    )
    log.info(tested_weights_line(metrics, overfit_hint))


def tested_weights_line(metrics: dict, overfit_hint: bool = True) -> str:
    """Which epoch's weights the test used, and why training stopped where it did."""
    monitor = metrics["monitor"].replace("_", " ")
    line = f"tested epoch {metrics['best_epoch']}'s weights (the best {monitor})"
    hp = metrics["hparams"]
    if metrics["stopped_early"]:
        line += (
            f"; early stopping ended training after epoch {metrics['epochs_run']} of {hp['epochs']}: {monitor} "
            "had not improved for trainer.early_stopping_patience epochs"
        )
    else:
        line += f"; trained all {plural(hp['epochs'], 'epoch')}" if hp["epochs"] > 1 else "; trained its one epoch"
    train_acc = metrics["last_train_accuracy"]
    if overfit_hint and train_acc is not None and train_acc - metrics["best_val_accuracy"] > 0.1:
        line += f"; training accuracy {train_acc:.2f} ran ahead of validation: the model overfits (try more dropout)"
    return line


def stop_logging_into(run_dir: Path) -> None:
    """Detach the log files inside ``run_dir`` (Hydra's ``train.log``) from the root logger."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.resolve():
            root.removeHandler(handler)
            handler.close()


@contextlib.contextmanager
def failure_told(run_ends, cfg, job):
    """Tell each of ``run_ends`` (the extras' ``RUN_END``) that the run failed, then let the failure go on."""
    try:
        yield
    except Exception:
        for run_end in run_ends:
            try:
                run_end(cfg, job, None)
            except Exception as end_err:  # e.g. the disk is still full: the first failure is the news
                log.warning(f"after the failure, {describe(end_err)}")
        raise
