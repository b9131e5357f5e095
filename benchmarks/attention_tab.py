"""How long the Attention tab takes to answer one slider position, for a run of few and of many epochs.

    python benchmarks/attention_tab.py --epochs 3 30 --tokens 512

Writes head-view summaries as a run's AttentionLogger does (3 probes of --tokens tokens, 2 layers x 4 heads,
one record per epoch) for each epoch count, starts a real ``tensorboard`` on them, and times
``/data/plugin/mha_attention/data?run=R&step=S`` (the request the slider makes), rounds alternating between
the runs. Prints one JSON object: the median seconds per answer for each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np


def write_run(logdir: Path, epochs: int, tokens: int, probes: int = 3, layers: int = 2, heads: int = 4) -> None:
    import tensorflow as tf

    from mha_project.extras.head_view.summary import write_head_view_summary

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(tokens)]
    with tf.summary.create_file_writer(str(logdir)).as_default():
        for epoch in range(epochs):
            for k in range(probes):
                logits = rng.normal(size=(layers, heads, tokens, tokens))
                weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
                write_head_view_summary(k, " ".join(words), words, list(weights), "predicted pos", "synthetic", epoch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, nargs="+", default=[3, 30])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="attention_tab_"))
    for epochs in args.epochs:
        write_run(root / f"epochs_{epochs}", epochs, args.tokens)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(root), "--port", str(port), "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    url = f"http://127.0.0.1:{port}/data/plugin/mha_attention"
    try:
        deadline = time.time() + 300
        while True:  # until every run is loaded
            try:
                runs = json.loads(urllib.request.urlopen(f"{url}/runs", timeout=30).read())
                if len(runs) == len(args.epochs) and all(len(r["steps"]) == int(r["run"].split("_")[1]) for r in runs):
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("error: tensorboard did not load the runs in 300 s")
            time.sleep(1)
        times = {r["run"]: [] for r in runs}
        for _ in range(args.rounds):
            for run in list(times) if _ % 2 == 0 else list(times)[::-1]:  # alternate who goes first
                start = time.perf_counter()
                answer = urllib.request.urlopen(f"{url}/data?run={run}&step=1", timeout=60).read()
                times[run].append(time.perf_counter() - start)
                assert len(json.loads(answer)) == 3
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        json.dumps(
            {run: round(statistics.median(t), 4) for run, t in times.items()} | {"tokens": args.tokens}, indent=1
        )
    )


if __name__ == "__main__":
    main()
