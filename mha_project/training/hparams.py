"""What a run records for TensorBoard's HParams dashboard, and how a sweep describes its search space.

* Each run writes a *session*: its hyper-parameters when training starts (read from the resolved model,
  trainer and data config, i.e. what was trained, so ``model.num_heads=8`` records ``heads: 8``), and its
  status (success / failure) when it ends. A session with no status yet is running (or was killed).
* A sweep writes one *experiment* config in the sweep directory when it starts: typed domains
  (``hp.Discrete`` for choices, ``hp.IntInterval`` / ``hp.RealInterval`` for ranges and single values)
  and ``differs`` set on the swept keys. TensorBoard sorts differing hyper-parameters first and shows the
  first five columns by default, so the swept keys are the visible ones. Runs of a sweep carry no
  experiment config of their own: TensorBoard uses the first one it finds, so there must be only one.
* A single run writes an experiment config of its own, without domains (every value shows) but with the
  metrics declared: without one TensorBoard would make a column of every scalar the run logged."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import tensorflow as tf
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from tensorboard.plugins.hparams import api as hp
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2, summary

from mha_project.config import SHORTCUTS, ModelConfig, TrainConfig


def _recorded_paths() -> dict[str, str]:
    """Name in TensorBoard -> where the trained value lives in the resolved config: every shortcut by its
    name, every other model option by its own (so an option added to the schema is recorded with no list to
    update), and the data, seed and pretraining that tell runs apart."""
    paths = {name: keys[0] for name, keys in SHORTCUTS.items()}
    set_by_shortcut = {key for keys in SHORTCUTS.values() for key in keys}
    for option in dataclasses.fields(ModelConfig):
        if f"model.{option.name}" not in set_by_shortcut:
            paths[option.name] = f"model.{option.name}"
    return paths | {
        "truncation": "data.truncation",
        "dataset": "data.name",
        "seed": "seed",
        "ngram_lr": "trainer.ngram_lr",
        "pretrain": "pretrain.objective",
    }


def _schema_type(path: str):
    schema, *parents, last = [TrainConfig, *path.split(".")]
    for name in parents:
        schema = typing.get_type_hints(schema)[name]
    return typing.get_type_hints(schema)[last]


HPARAM_PATHS = _recorded_paths()
INT_HPARAMS = {name for name, path in HPARAM_PATHS.items() if _schema_type(path) in (int, typing.Optional[int])}


# TensorBoard's HParams table sorts its columns by `differs` (true first), then by name, and shows the first
# few. These keys, what the project is about, are marked as differing in every experiment config, so they
# and the swept keys are the columns a table opens with.
FIRST_COLUMNS = ("heads", "key_dim", "dropout")

# What a sweep's override may be called on the command line: a shortcut, or the seed.
COMMAND_LINE_NAMES = set(SHORTCUTS) | {"seed"}


# Final metrics (scalars written by log_final_metrics) and the live validation accuracy of Keras's
# TensorBoard callback, so a running job shows its latest epoch.
FINAL_METRICS = ("test_accuracy", "test_loss", "best_val_accuracy", "train_seconds")


def hparams_of(cfg: DictConfig) -> dict:
    """The hyper-parameters a run trained with, by their short names; no nulls."""
    values = {name: OmegaConf.select(cfg, path) for name, path in HPARAM_PATHS.items()}
    if values["value_dim"] is None:
        values["value_dim"] = values["key_dim"]
    return {k: v for k, v in values.items() if v is not None}


def name_of_override_key(key: str) -> str | None:
    """``heads`` or ``model.num_heads`` -> ``heads``; keys that are not recorded -> None."""
    key = key.lstrip("+~")
    if key in COMMAND_LINE_NAMES:
        return key
    for name, path in HPARAM_PATHS.items():
        if key == path:
            return name
    return None


def run_label() -> str:
    """How TensorBoard's Attention tab lists this run: in a sweep, its values of the swept keys
    (``heads=8 key_dim=16``, from the sweep's multirun.yaml); else its recorded hyper-parameters set on the
    command line; empty for a run with the defaults or outside Hydra."""
    if not HydraConfig.initialized():
        return ""
    hydra_cfg = HydraConfig.get()
    overrides = [str(o) for o in hydra_cfg.overrides.task]
    keys = [o.split("=", 1)[0] for o in overrides]
    sweep_file = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
    if hydra_cfg.mode == RunMode.MULTIRUN and sweep_file.is_file():
        swept = set(sweep_params_of(OmegaConf.load(sweep_file)))
        return " ".join(o for o, key in zip(overrides, keys) if key in swept)
    return " ".join(o for o, key in zip(overrides, keys) if name_of_override_key(key) is not None)


def swept_domains(sweep_params: dict[str, str]) -> dict:
    """Parse sweep values as Hydra does (``2,4,8``, ``choice(2,4)``, ``range(1,4)``, ``interval(1e-4,1e-2)``,
    ``int(interval(1,8))``) into ``{name: ("discrete", [values]) | ("interval", lo, hi, is_int)}``."""
    parser = OverridesParser.create()
    domains = {}
    for key, value in sweep_params.items():
        name = name_of_override_key(str(key))
        if name is None:
            continue
        override = parser.parse_override(f"{key}={value}")
        swept = override.value()
        if isinstance(swept, ChoiceSweep):
            domains[name] = ("discrete", [_plain(v) for v in swept.list])
        elif isinstance(swept, RangeSweep):
            domains[name] = ("discrete", [_plain(v) for v in override.sweep_iterator()])
        elif isinstance(swept, IntervalSweep):
            is_int = "int" in swept.tags or name in INT_HPARAMS
            domains[name] = ("interval", swept.start, swept.end, is_int)
    return domains


def sweep_params_of(config: DictConfig) -> dict[str, str]:
    """The swept keys of a multirun: ``hydra.sweeper.params`` plus sweeps typed on the command line."""
    declared = config.hydra.sweeper.get("params")
    params = {} if declared is None else dict(OmegaConf.to_container(declared, resolve=False))
    for override in config.hydra.overrides.task:
        key, _, value = str(override).partition("=")
        if "," in value or value.strip().startswith(("choice(", "range(", "interval(", "int(", "glob(")):
            params[key] = value
    return params


def experiment_hparams(cfg: DictConfig, domains: dict):
    """``hp.HParam`` objects with typed domains, and the names that differ across the sweep."""
    hparams, differs = [], set()
    if OmegaConf.select(cfg, HPARAM_PATHS["value_dim"]) is None and "key_dim" in domains:
        domains = {"value_dim": domains["key_dim"], **domains}  # value_dim follows key_dim
    for name, value in hparams_of(cfg).items():
        domain = domains.get(name)
        if domain and domain[0] == "discrete":
            values = domain[1]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                values = [float(v) for v in values]  # TensorBoard's discrete domains hold one type
            hparams.append(hp.HParam(name, hp.Discrete(values)))
            differs |= {name} if len(set(values)) > 1 else set()
        elif domain:
            _, lo, hi, is_int = domain
            span = hp.IntInterval(int(lo), int(hi)) if is_int else hp.RealInterval(float(lo), float(hi))
            hparams.append(hp.HParam(name, span))
            differs.add(name)
        elif isinstance(value, (str, bool)):
            hparams.append(hp.HParam(name, hp.Discrete([value])))
        elif isinstance(value, int) and not isinstance(value, bool):
            hparams.append(hp.HParam(name, hp.IntInterval(value, value)))
        else:
            hparams.append(hp.HParam(name, hp.RealInterval(float(value), float(value))))
    return hparams, differs


def write_experiment(log_dir: Path, cfg: DictConfig, domains: dict | None) -> None:
    """The one experiment config of a sweep (``hp.hparams_config``, with ``differs`` on swept keys), or with
    ``domains=None`` a single run's: its hyper-parameters without domains, so no value is filtered out."""
    if domains is None:
        hparams, differs = [hp.HParam(name) for name in hparams_of(cfg)], set()
    else:
        hparams, differs = experiment_hparams(cfg, domains)
    differs |= set(FIRST_COLUMNS)
    metrics = [hp.Metric(f"hparams/{m}", display_name=m) for m in FINAL_METRICS]
    metrics.append(hp.Metric("epoch_accuracy", group="validation", display_name="val_accuracy (latest)"))
    summary = hp.hparams_config_pb(hparams, metrics)
    # hparams_config_pb has no `differs` argument; set it on the experiment proto before writing.
    experiment = metadata.parse_experiment_plugin_data(summary.value[0].metadata.plugin_data.content)
    for info in experiment.hparam_infos:
        info.differs = info.name in differs
    summary.value[0].metadata.CopyFrom(
        metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(experiment=experiment))
    )
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=0)
    writer.close()


def trial_name(run_dir: Path) -> str:
    """How the HParams table names a run: its path from where training was started (``outputs/runs/<time>``,
    ``outputs/multirun/<time>/3``), which stays unique and readable; absolute when it lies elsewhere."""
    run_dir = Path(run_dir).resolve()
    return str(run_dir.relative_to(Path.cwd())) if run_dir.is_relative_to(Path.cwd()) else str(run_dir)


def write_session_start(log_dir: Path, cfg: DictConfig, run_dir: Path) -> None:
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        hp.hparams(hparams_of(cfg), trial_id=trial_name(run_dir))
    writer.close()


def write_session_end(log_dir: Path, success: bool, metrics: dict | None = None) -> None:
    """The session's status, and on success the final metrics as ``hparams/<metric>`` scalars."""
    status = api_pb2.STATUS_SUCCESS if success else api_pb2.STATUS_FAILURE
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        for m in FINAL_METRICS:
            if metrics and metrics.get(m) is not None:
                tf.summary.scalar(f"hparams/{m}", float(metrics[m]), step=0)
        end = summary.session_end_pb(status)  # a tf.compat.v1.Summary
        tf.summary.experimental.write_raw_pb(end.SerializeToString(), step=0)
    writer.close()


def _plain(value):
    return value.item() if hasattr(value, "item") else value
