"""The hyper-parameters a run trained with, by the names a user types (``heads``, ``key_dim``): recorded in
``metrics.json``, shown as a run's label in TensorBoard, and how a sweep's swept keys are found. TensorBoard's
HParams dashboard is the ``hparams`` extra's."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mha_project.config import SHORTCUTS, schema
from mha_project.extending import HPARAMS


def hparam_paths() -> dict[str, str]:
    """Name in TensorBoard -> where the trained value lives in the resolved config: every shortcut by its
    name, every other model option by its own (so an option added to the schema, an extra's too, is recorded
    with no list to update), the data and seed that tell runs apart, and the extras' own (``HPARAMS``)."""
    paths = {name: keys[0] for name, keys in SHORTCUTS.items()}
    set_by_shortcut = {key for keys in SHORTCUTS.values() for key in keys}
    model = typing.get_type_hints(schema())["model"]  # with the extras' model options
    for option in dataclasses.fields(model):
        if f"model.{option.name}" not in set_by_shortcut:
            paths[option.name] = f"model.{option.name}"
    return paths | {"truncation": "data.truncation", "dataset": "data.name", "seed": "seed"} | HPARAMS


# What a sweep's override may be called on the command line: a shortcut, or the seed.
COMMAND_LINE_NAMES = set(SHORTCUTS) | {"seed"}


def hparams_of(cfg: DictConfig) -> dict:
    """The hyper-parameters a run trained with, by their short names; no nulls."""
    values = {name: OmegaConf.select(cfg, path) for name, path in hparam_paths().items()}
    if values["value_dim"] is None:
        values["value_dim"] = values["key_dim"]
    return {k: v for k, v in values.items() if v is not None}


def name_of_override_key(key: str) -> str | None:
    """``heads`` or ``model.num_heads`` -> ``heads``; keys that are not recorded -> None."""
    key = key.lstrip("+~")
    if key in COMMAND_LINE_NAMES:
        return key
    for name, path in hparam_paths().items():
        if key == path:
            return name
    return None


def run_label(job) -> str:
    """How TensorBoard's Attention tab lists this run: in a sweep, its values of the swept keys
    (``heads=8 key_dim=16``, from the sweep's multirun.yaml); else its recorded hyper-parameters set on the
    command line; empty for a run with the defaults or outside Hydra."""
    overrides = [str(o) for o in job.overrides]
    keys = [o.split("=", 1)[0] for o in overrides]
    sweep_file = Path(job.sweep_dir or ".") / "multirun.yaml"
    if job.in_sweep and sweep_file.is_file():
        swept = set(sweep_params_of(OmegaConf.load(sweep_file)))
        return " ".join(o for o, key in zip(overrides, keys) if key in swept)
    return " ".join(o for o, key in zip(overrides, keys) if name_of_override_key(key) is not None)


def sweep_params_of(config: DictConfig) -> dict[str, str]:
    """The swept keys of a multirun: ``hydra.sweeper.params`` plus sweeps typed on the command line."""
    declared = config.hydra.sweeper.get("params")
    params = {} if declared is None else dict(OmegaConf.to_container(declared, resolve=False))
    for override in config.hydra.overrides.task:
        key, _, value = str(override).partition("=")
        if "," in value or value.strip().startswith(("choice(", "range(", "interval(", "int(", "glob(")):
            params[key] = value
    return params
