"""Where an extra plugs into the core, so that the core names none of them.

An extra is a package in ``mha_project/extras/``; importing it registers what it adds here: a data source
under its ``data=`` name, a check of its settings, Keras callbacks for the classifier's fit. The entry points
(``scripts/*.py``) import ``mha_project.extras``, which imports every extra present: delete one's folder and
config group and the core runs without it. Importing this module is cheap (no TensorFlow).
"""

from __future__ import annotations

from collections.abc import Callable

# data.name -> loader(data_cfg, seed) -> ((train_texts, train_labels), (test_texts, test_labels), class_names)
DATA_SOURCES: dict[str, Callable] = {}
# Each runs after the core's own checks of a config (before anything is loaded or written); raises ConfigError.
CHECKS: list[Callable] = []
# Each returns Keras callbacks for the classifier's fit: factory(cfg, job) -> list[keras.callbacks.Callback].
FIT_CALLBACKS: list[Callable] = []
# Each adds a section to scripts/sweep_report.py's report: section(sweep_dir) -> {"markdown": ...} or None.
SWEEP_REPORT_SECTIONS: list[Callable] = []


def data_source(name: str):
    """Register the decorated loader as ``data=<name>``."""

    def register(loader: Callable) -> Callable:
        DATA_SOURCES[name] = loader
        return loader

    return register


def config_check(check: Callable) -> Callable:
    """Register the decorated function as a check of every config."""
    CHECKS.append(check)
    return check


def fit_callbacks(factory: Callable) -> Callable:
    """Register the decorated factory of Keras callbacks for the classifier's fit."""
    FIT_CALLBACKS.append(factory)
    return factory
