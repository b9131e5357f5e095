"""What a run records for TensorBoard's HParams dashboard, and how a sweep describes its search space.

* Each run writes a *session*: its hyper-parameters when training starts (read from the resolved model,
  trainer and data config, i.e. what was trained, so ``model.backbone.num_heads=8`` records ``heads: 8``), and its
  status (success / failure) when it ends. A session with no status yet is running (or was killed).
* A sweep writes one *experiment* config in the sweep directory when it starts: typed domains
  (``hp.Discrete`` for choices, ``hp.IntInterval`` / ``hp.RealInterval`` for ranges and single values)
  and ``differs`` set on the swept keys. TensorBoard sorts differing hyper-parameters first and shows the
  first five columns by default, so the swept keys are the visible ones. Runs of a sweep carry no
  experiment config of their own: TensorBoard uses the first one it finds, so there must be only one.
* A single run writes an experiment config of its own, without domains (every value shows) but with the
  metrics declared: without one TensorBoard would make a column of every scalar the run logged."""

from __future__ import annotations

import re
from pathlib import Path

import keras
import tensorflow as tf
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from omegaconf import DictConfig, OmegaConf
from tensorboard.plugins.hparams import api as hp
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2, summary

from mha_project.config import SHORTCUTS, hparams_of

# TensorBoard's HParams table sorts its columns by `differs` (true first), then by name, and shows the first
# few. These keys, what the project is about, are marked as differing in every experiment config, so they
# and the swept keys are the columns a table opens with.
FIRST_COLUMNS = ("heads", "key_dim", "dropout", "dataset", "layers")
SHOWN_COLUMNS = 5  # what TensorBoard's HParams table shows before a column is ticked

# Final metrics (scalars written by log_final_metrics) and the live validation accuracy of Keras's
# TensorBoard callback, so a running job shows its latest epoch.
FINAL_METRICS = ("test_accuracy", "test_loss", "best_val_accuracy", "train_seconds")
# What a run chooses on its validation split when its setting is `auto` (metrics.json's `chosen`) -> that setting:
# the value chosen is a metric column (``chosen.ngram_c``), as it is known only once the run has chosen it.
CHOSEN = {"ngram_c": "model.ngram_branch.c"}


def recorded(cfg: DictConfig) -> dict:
    """The run's hyper-parameters as its metrics.json records them: with the config groups Hydra chose (a sweep's
    config holds them; a run's are in its .hydra/hydra.yaml, merged in by :class:`SessionStart`)."""
    return hparams_of(cfg, OmegaConf.select(cfg, "hydra.runtime.choices"))


def hparam_paths(cfg: DictConfig) -> dict[str, str]:
    """Name in TensorBoard -> where the trained value lives: every shortcut by its name, every other model option
    by its own (``hparams_of``'s names), the data and seed that tell runs apart."""
    paths = {name: keys[0] for name, keys in SHORTCUTS.items()}
    set_by_shortcut = {key for keys in SHORTCUTS.values() for key in keys}
    for part in ("model.backbone", "model"):
        node = OmegaConf.select(cfg, part) or {}
        for key in node:
            if f"{part}.{key}" not in set_by_shortcut and not str(key).startswith("_") and key not in paths:
                paths[str(key)] = f"{part}.{key}"
    return paths | {"truncation": "data.truncation", "dataset": "data.name", "seed": "seed"}


def name_of_override_key(key: str, paths: dict[str, str]) -> str | None:
    """``heads`` or ``model.backbone.num_heads`` -> ``heads``; keys that are not recorded -> None."""
    key = key.lstrip("+~")
    if key in SHORTCUTS or key == "seed":
        return key
    return next((name for name, path in paths.items() if key == path), None)


def swept_domains(cfg: DictConfig, sweep_params: dict[str, str]) -> dict:
    """Parse sweep values as Hydra does (``2,4,8``, ``choice(2,4)``, ``range(1,4)``, ``interval(1e-4,1e-2)``,
    ``int(interval(1,8))``) into ``{name: ("discrete", [values]) | ("interval", lo, hi, is_int)}``."""
    parser = OverridesParser.create()
    paths, values = hparam_paths(cfg), recorded(cfg)
    domains = {}
    for key, value in sweep_params.items():
        name = name_of_override_key(str(key), paths)
        if name is None:
            continue
        override = parser.parse_override(f"{key}={value}")
        swept = override.value()
        if isinstance(swept, ChoiceSweep):
            domains[name] = ("discrete", [_plain(v) for v in swept.list])
        elif isinstance(swept, RangeSweep):
            domains[name] = ("discrete", [_plain(v) for v in override.sweep_iterator()])
        elif isinstance(swept, IntervalSweep):
            is_int = "int" in swept.tags or (isinstance(values.get(name), int) and not isinstance(values[name], bool))
            domains[name] = ("interval", swept.start, swept.end, is_int)
    return domains


def experiment_hparams(cfg: DictConfig, domains: dict):
    """``hp.HParam`` objects, one per recorded hyper-parameter, and the names that differ across the sweep
    (the keys of ``domains``; value_dim follows key_dim). No domains: TensorBoard shows the first experiment
    config it finds under its logdir, and a sweep's ranges (dataset fine_foods, epochs 4-4) would filter out
    every other run under ``outputs/``; each value's type is set instead (:func:`write_experiment`)."""
    paths = hparam_paths(cfg)
    differs = {name for name in domains if name in paths}
    if OmegaConf.select(cfg, paths["value_dim"]) is None and "key_dim" in differs:
        differs.add("value_dim")
    return [hp.HParam(name) for name in recorded(cfg)], differs


def write_experiment(log_dir: Path, cfg: DictConfig, domains: dict | None) -> None:
    """The one experiment config of a sweep (``differs`` set on its swept keys) or, with ``domains=None``, of a
    single run: every hyper-parameter typed and without a domain, so no value is filtered out."""
    hparams, differs = experiment_hparams(cfg, domains or {})
    for name in FIRST_COLUMNS:  # the swept keys, then the project's own, up to the columns the table shows
        if len(differs) >= SHOWN_COLUMNS:
            break
        differs.add(name)
    metrics = [hp.Metric(f"hparams/{m}", display_name=m) for m in FINAL_METRICS]
    metrics += [
        hp.Metric(f"hparams/chosen.{name}", display_name=f"{name} (chosen)")
        for name, key in CHOSEN.items()
        if OmegaConf.select(cfg, key) == "auto"
    ]
    metrics.append(hp.Metric("epoch_accuracy", group="validation", display_name="val_accuracy (latest)"))
    summary = hp.hparams_config_pb(hparams, metrics)
    # hparams_config_pb has no `differs` or `type` argument; set them on the experiment proto before writing.
    experiment = metadata.parse_experiment_plugin_data(summary.value[0].metadata.plugin_data.content)
    values = recorded(cfg)
    for info in experiment.hparam_infos:
        info.differs = info.name in differs
        info.type = _data_type(values[info.name])
    summary.value[0].metadata.CopyFrom(
        metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(experiment=experiment))
    )
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=0)
    writer.close()


def _data_type(value):
    if isinstance(value, bool):
        return api_pb2.DATA_TYPE_BOOL
    if isinstance(value, (int, float)):
        return api_pb2.DATA_TYPE_FLOAT64
    return api_pb2.DATA_TYPE_STRING


def trial_name(run_dir: Path, in_sweep: bool = False) -> str:
    """How the HParams table's trial column names a run, what tells runs apart first (the column shows about 14
    characters): a run's folder, a Hydra time ``2026-12-01_10-00-05`` as ``12-01 10:00:05``; a sweep job's
    number, then its sweep's folder (``3 · 12-01 10:00:05``). Unique: the table groups sessions by it."""
    run_dir = Path(run_dir).resolve()
    if in_sweep:
        return f"{run_dir.name} · {_short_time(run_dir.parent.name)}"
    return _short_time(run_dir.name)


def _short_time(name: str) -> str:
    found = re.fullmatch(r"\d{4}-(\d\d-\d\d)_(\d\d)-(\d\d)-(\d\d)", name)
    return f"{found[1]} {found[2]}:{found[3]}:{found[4]}" if found else name


def write_session_start(log_dir: Path, cfg: DictConfig, run_dir: Path, in_sweep: bool = False) -> None:
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        hp.hparams(recorded(cfg), trial_id=trial_name(run_dir, in_sweep))
    writer.close()


def write_session_end(log_dir: Path, success: bool, metrics: dict | None = None) -> None:
    """The session's status, and on success the final metrics as ``hparams/<metric>`` scalars."""
    status = api_pb2.STATUS_SUCCESS if success else api_pb2.STATUS_FAILURE
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        for m in FINAL_METRICS:
            if metrics and metrics.get(m) is not None:
                tf.summary.scalar(f"hparams/{m}", float(metrics[m]), step=0)
        for name, choice in ((metrics or {}).get("chosen") or {}).items():
            tf.summary.scalar(f"hparams/chosen.{name}", float(choice["c"]), step=0)
        end = summary.session_end_pb(status)  # a tf.compat.v1.Summary
        tf.summary.experimental.write_raw_pb(end.SerializeToString(), step=0)
    writer.close()


def _plain(value):
    return value.item() if hasattr(value, "item") else value


class SessionStart(keras.callbacks.Callback):
    """The run's session when its fit starts, so it shows while it trains (its hyper-parameters from the run's
    recorded config); a single run's own experiment config first (a sweep's is the sweep directory's)."""

    def __init__(self, run_dir):
        super().__init__()
        self.run_dir = Path(run_dir)

    def on_train_begin(self, logs=None):
        cfg = OmegaConf.load(self.run_dir / ".hydra" / "config.yaml")
        if (self.run_dir / ".hydra" / "hydra.yaml").is_file():  # the groups Hydra chose, when it ran the job
            cfg = OmegaConf.merge(cfg, OmegaConf.load(self.run_dir / ".hydra" / "hydra.yaml"))
        log_dir, in_sweep = self.run_dir / "tensorboard", in_a_sweep(self.run_dir)
        if not in_sweep:
            write_experiment(log_dir, cfg, domains=None)
        write_session_start(log_dir, cfg, self.run_dir, in_sweep)


def in_a_sweep(run_dir) -> bool:
    from mha_project.training.train import hydra_job

    hydra = hydra_job(run_dir)
    return hydra is not None and hydra.mode.name == "MULTIRUN"


def sweep_params_of(config: DictConfig) -> dict[str, str]:
    """The swept keys of a multirun: ``hydra.sweeper.params`` plus sweeps typed on the command line."""
    declared = config.hydra.sweeper.get("params")
    params = {} if declared is None else dict(OmegaConf.to_container(declared, resolve=False))
    for override in config.hydra.overrides.task:
        key, _, value = str(override).partition("=")
        if "," in value or value.strip().startswith(("choice(", "range(", "interval(", "int(", "glob(")):
            params[key] = value
    return params
