"""What runs and sweeps record for TensorBoard's HParams dashboard, checked through TensorBoard's own HTTP API."""

import contextlib
import json
import urllib.request
from pathlib import Path

import pytest

from conftest import QUIET, compose_cfg, poll, scalar_events, tensorboard_server, train_tiny
from mha_project.config import hparams_of
from mha_project.extras.hparams.dashboard import FINAL_METRICS, experiment_hparams, swept_domains


def test_hparams_are_what_was_trained_not_the_shortcuts():
    cfg = compose_cfg("model.backbone.num_heads=8", "model.backbone.key_dim=16")
    recorded = hparams_of(cfg)
    assert recorded["heads"] == 8 and recorded["key_dim"] == 16
    assert recorded["value_dim"] == 16  # null in the config: Keras uses key_dim, so that is what is recorded
    assert None not in recorded.values() and "null" not in recorded.values()
    assert recorded["dataset"] == "fine_foods" and recorded["embedding_norm"] == "layer_norm"
    assert hparams_of(compose_cfg("data.truncation=tail"))["truncation"] == "tail"


def test_sweep_values_become_typed_domains():
    domains = swept_domains(
        compose_cfg(),
        {
            "heads": "1,2,4",
            "key_dim": "choice(8,16)",
            "layers": "range(1,4)",
            "lr": "interval(0.0001,0.01)",
            "model.backbone.ff_dim": "int(interval(16,64))",
            "data.limit": "100,200",  # not a recorded hyper-parameter
        },
    )
    assert domains["heads"] == ("discrete", [1, 2, 4])
    assert domains["key_dim"] == ("discrete", [8, 16])
    assert domains["layers"] == ("discrete", [1, 2, 3])
    assert domains["lr"] == ("interval", 0.0001, 0.01, False)
    assert domains["ff_dim"] == ("interval", 16, 64, True)
    assert set(domains) == {"heads", "key_dim", "layers", "lr", "ff_dim"}

    hparams, differs = experiment_hparams(compose_cfg(), domains)
    assert differs == {"heads", "key_dim", "value_dim", "layers", "lr", "ff_dim"}  # value_dim follows key_dim
    # No domain: under outputs/ TensorBoard shows the first experiment it finds, and one sweep's ranges
    # (dataset fine_foods, epochs 4-4) would filter out every other run.
    assert all(h.domain is None for h in hparams)


@contextlib.contextmanager
def tensorboard(logdir: Path):
    """A real `tensorboard` on a free port; yields a function that POSTs to the HParams plugin."""
    with tensorboard_server("--logdir", str(logdir)) as url:

        def post(route: str, body: dict) -> dict:
            request = urllib.request.Request(
                f"{url}/data/plugin/hparams/{route}",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            return json.loads(urllib.request.urlopen(request, timeout=10).read())

        yield post


def _until(post, route, body, ready, seconds=90):
    return poll(lambda: post(route, body), ready, seconds)


ALL_STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]


def _session_groups(post, count: int) -> list[dict]:
    body = {"experimentName": "", "allowedStatuses": ALL_STATUSES, "colParams": [], "startIndex": 0, "sliceSize": 100}
    return _until(post, "session_groups", body, lambda g: len(g.get("sessionGroups", [])) == count)["sessionGroups"]


@pytest.mark.subprocess
@pytest.mark.slow
def test_tensorboard_hparams_dashboard_shows_typed_swept_keys_and_every_status(sweep_dir):
    # sweep_dir: heads=0 (refused before it starts), 1 and 2.
    with tensorboard(sweep_dir) as post:
        experiment = _until(post, "experiment", {"experimentName": ""}, lambda e: e.get("hparamInfos"))
        groups = _session_groups(post, 2)

    infos = experiment["hparamInfos"]
    assert all(i["type"] != "DATA_TYPE_UNSET" for i in infos)
    # TensorBoard's table shows the first five columns by default, after sorting differing ones first: the
    # swept key (heads) and the two others the project is about.
    assert [i["name"] for i in infos[:5]] == ["dataset", "dropout", "heads", "key_dim", "layers"]
    assert [i["name"] for i in infos if i["differs"]] == ["dataset", "dropout", "heads", "key_dim", "layers"]
    assert not any("domainDiscrete" in i or "domainInterval" in i for i in infos)  # no run filtered out
    assert {i["name"]: i["type"] for i in infos}["dataset"] == "DATA_TYPE_STRING"
    assert {m["name"]["tag"] for m in experiment["metricInfos"]} >= {"hparams/test_accuracy", "epoch_accuracy"}

    status = {g["name"].split(" · ")[0]: g["sessions"][0]["status"] for g in groups}
    assert status == {"1": "STATUS_SUCCESS", "2": "STATUS_SUCCESS"}
    heads = {g["name"].split(" · ")[0]: g["hparams"]["heads"] for g in groups}
    assert heads == {"1": 1.0, "2": 2.0}
    for g in groups:
        assert "null" not in g["hparams"].values() and g["hparams"]["value_dim"] == 8.0
    assert all(any(m["name"]["tag"] == "hparams/test_accuracy" for m in g["metricValues"]) for g in groups)
    # TensorBoard's record and metrics.json agree, key for key
    recorded = json.loads((sweep_dir / "1" / "metrics.json").read_text())["hparams"]
    shown = next(g["hparams"] for g in groups if g["name"].split(" · ")[0] == "1")
    assert recorded == shown


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_single_runs_table_has_the_declared_metrics_only_and_a_failed_run_says_so(tiny_run, tmp_path):
    # A run declares its five metrics; without an experiment config TensorBoard would make a column of every
    # scalar (each head's entropy, the clock).
    from mha_project.extras.run_record.callback import point_latest_at

    diverged = tmp_path / "outputs" / "runs" / "diverged"
    result = train_tiny(diverged, "lr=1e30", *QUIET)
    assert result.returncode == 2 and "training diverged" in result.stderr
    # latest is a file, not a link TensorBoard would follow and show as the same run twice.
    point_latest_at(diverged)
    assert (diverged.parent / "latest").is_file()
    for logdir, status in ((tiny_run, "STATUS_SUCCESS"), (diverged.parent, "STATUS_FAILURE")):
        with tensorboard(logdir) as post:
            experiment = _until(post, "experiment", {"experimentName": ""}, lambda e: e.get("metricInfos"))
            (group,) = _session_groups(post, 1)  # one session per run: latest is not walked
        metrics = [m["name"]["tag"] for m in experiment["metricInfos"]]
        assert metrics == [f"hparams/{m}" for m in FINAL_METRICS] + ["epoch_accuracy"]
        # A single run's columns open on the project's own (not batch_size, activation, ...).
        first = [i["name"] for i in experiment["hparamInfos"][:5]]
        assert first == ["dataset", "dropout", "heads", "key_dim", "layers"]
        assert group["sessions"][0]["status"] == status
        assert group["hparams"]["heads"] == 2.0


@pytest.mark.slow
def test_attention_and_keras_epoch_scalars_share_their_steps(tiny_run):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    runs = EventMultiplexer().AddRunsFromDirectory(str(tiny_run / "tensorboard"))
    runs.Reload()
    epochs = [e.step for e in runs.Tensors("validation", "epoch_accuracy")]
    attention = runs.Runs()["."]["tensors"]
    image = next(tag for tag in attention if tag.startswith("attention/"))
    entropy = next(tag for tag in attention if "entropy" in tag)
    assert epochs == list(range(1, len(epochs) + 1)) and epochs  # epoch k at step k, as Keras's progress counts
    # The attention also at step 0: the weights before training.
    assert [e.step for e in runs.Tensors(".", image)] == [0, *epochs]
    assert [e.step for e in runs.Tensors(".", entropy)] == [0, *epochs]


def test_a_trial_is_named_short_enough_for_the_tables_column(tmp_path, monkeypatch):
    from mha_project.extras.hparams.dashboard import trial_name

    monkeypatch.chdir(tmp_path)
    assert trial_name(tmp_path / "outputs" / "runs" / "2026-12-01_10-00-05") == "12-01 10:00:05"
    assert trial_name(Path("outputs/multirun/2026-12-01_10-00-05/3"), in_sweep=True) == "3 · 12-01 10:00:05"
    assert trial_name(Path("outputs/my_sweep/trial_3"), in_sweep=True) == "trial_3 · my_sweep"


def test_a_value_chosen_on_validation_is_a_metric_column_of_the_runs_that_choose_it(tmp_path):
    import tensorflow as tf
    from tensorboard.plugins.hparams import metadata

    from mha_project.extras.hparams.dashboard import write_experiment, write_session_end

    def declared_metrics(log_dir):
        for path in log_dir.glob("events.out.tfevents.*"):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                for value in event.summary.value:
                    if value.tag == metadata.EXPERIMENT_TAG:
                        experiment = metadata.parse_experiment_plugin_data(value.metadata.plugin_data.content)
                        return [m.name.tag for m in experiment.metric_infos]

    for c, declared in (("auto", True), ("0.5", False)):
        log_dir = tmp_path / c
        write_experiment(log_dir, compose_cfg("model=wide_deep", f"model.ngram_branch.c={c}"), domains=None)
        chosen = {"ngram_c": {"c": 0.3162, "grid": [0.1, 0.3162], "val_accuracy": [0.8, 0.9]}} if declared else None
        write_session_end(log_dir, success=True, metrics={"test_accuracy": 0.9, "chosen": chosen})
        metrics = declared_metrics(log_dir)
        assert ("hparams/chosen.ngram_c" in metrics) == declared, metrics
        written = scalar_events(log_dir, "hparams/chosen.")
        assert written == ({"hparams/chosen.ngram_c": [(0, pytest.approx(0.3162))]} if declared else {})
