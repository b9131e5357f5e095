"""What runs and sweeps record for TensorBoard's HParams dashboard, checked through TensorBoard's own HTTP API."""

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import QUIET, compose_cfg, train_tiny
from mha_project.training.hparams import experiment_hparams, hparams_of, swept_domains


def test_hparams_are_what_was_trained_not_the_shortcuts():
    cfg = compose_cfg("model.num_heads=8", "model.key_dim=16")
    recorded = hparams_of(cfg)
    assert recorded["heads"] == 8 and recorded["key_dim"] == 16
    assert recorded["value_dim"] == 16  # null in the config: Keras uses key_dim, so that is what is recorded
    assert None not in recorded.values() and "null" not in recorded.values()
    assert recorded["dataset"] == "fine_foods" and recorded["embedding_norm"] == "layer_norm"
    assert hparams_of(compose_cfg("data.truncation=tail"))["truncation"] == "tail"


def test_sweep_values_become_typed_domains():
    domains = swept_domains(
        {
            "heads": "1,2,4",
            "key_dim": "choice(8,16)",
            "layers": "range(1,4)",
            "lr": "interval(0.0001,0.01)",
            "model.ff_dim": "int(interval(16,64))",
            "data.limit": "100,200",  # not a recorded hyper-parameter
        }
    )
    assert domains["heads"] == ("discrete", [1, 2, 4])
    assert domains["key_dim"] == ("discrete", [8, 16])
    assert domains["layers"] == ("discrete", [1, 2, 3])
    assert domains["lr"] == ("interval", 0.0001, 0.01, False)
    assert domains["ff_dim"] == ("interval", 16, 64, True)
    assert set(domains) == {"heads", "key_dim", "layers", "lr", "ff_dim"}

    hparams, differs = experiment_hparams(compose_cfg(), domains)
    by_name = {h.name: h for h in hparams}
    assert differs == {"heads", "key_dim", "value_dim", "layers", "lr", "ff_dim"}  # value_dim follows key_dim
    assert type(by_name["heads"].domain).__name__ == "Discrete" and by_name["heads"].domain.values == [1, 2, 4]
    assert type(by_name["lr"].domain).__name__ == "RealInterval"
    assert type(by_name["ff_dim"].domain).__name__ == "IntInterval"
    assert type(by_name["seed"].domain).__name__ == "IntInterval"  # fixed: a one-value interval, typed
    assert by_name["dataset"].domain.values == ["fine_foods"]


@contextlib.contextmanager
def tensorboard(logdir: Path):
    """A real `tensorboard` on a free port; yields a function that POSTs to the HParams plugin."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port)]
        + ["--host", "127.0.0.1", "--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def post(route: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/data/plugin/hparams/{route}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        return json.loads(urllib.request.urlopen(request, timeout=10).read())

    try:
        yield post
    finally:
        server.terminate()
        server.wait(timeout=30)


def _until(post, route, body, ready, seconds=90):
    deadline = time.monotonic() + seconds
    while True:
        try:
            answer = post(route, body)
            if ready(answer) or time.monotonic() > deadline:
                return answer
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


@pytest.mark.slow
def test_tensorboard_hparams_dashboard_shows_typed_swept_keys_and_every_status(sweep_dir):
    # sweep_dir: heads=0 (refused before it starts), 1 and 2. Next to it, a run that fails after starting.
    diverged = sweep_dir.parent / "diverged"
    result = train_tiny(diverged, "lr=1e30", *QUIET)
    assert result.returncode == 2 and "training diverged" in result.stderr

    with tensorboard(sweep_dir.parent) as post:
        experiment = _until(post, "experiment", {"experimentName": ""}, lambda e: e.get("hparamInfos"))
        groups = _until(
            post,
            "session_groups",
            {
                "experimentName": "",
                "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
                "colParams": [],
                "startIndex": 0,
                "sliceSize": 100,
            },
            lambda g: len(g.get("sessionGroups", [])) == 3,
        )["sessionGroups"]

    infos = experiment["hparamInfos"]
    assert all(i["type"] != "DATA_TYPE_UNSET" for i in infos)
    # TensorBoard's table shows the first five columns by default, after sorting differing ones first.
    assert infos[0]["name"] == "heads" and infos[0]["differs"] is True
    assert sorted(infos[0]["domainDiscrete"]) == [0.0, 1.0, 2.0]
    assert [i["name"] for i in infos if i["differs"]] == ["heads"]
    assert {m["name"]["tag"] for m in experiment["metricInfos"]} >= {"hparams/test_accuracy", "epoch_accuracy"}

    status = {Path(g["name"]).name: g["sessions"][0]["status"] for g in groups}
    assert status == {"1": "STATUS_SUCCESS", "2": "STATUS_SUCCESS", "diverged": "STATUS_FAILURE"}
    heads = {Path(g["name"]).name: g["hparams"]["heads"] for g in groups}
    assert heads == {"1": 1.0, "2": 2.0, "diverged": 2.0}
    for g in groups:
        assert "null" not in g["hparams"].values() and g["hparams"]["value_dim"] == 8.0
    finished = [g for g in groups if Path(g["name"]).name in ("1", "2")]
    assert all(any(m["name"]["tag"] == "hparams/test_accuracy" for m in g["metricValues"]) for g in finished)
    # TensorBoard's record and metrics.json agree, key for key
    recorded = json.loads((sweep_dir / "1" / "metrics.json").read_text())["hparams"]
    shown = next(g["hparams"] for g in groups if Path(g["name"]).name == "1")
    assert recorded == shown
