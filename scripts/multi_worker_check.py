"""Does Keras 3's model.fit work under tf.distribute.MultiWorkerMirroredStrategy on this machine?

    python scripts/multi_worker_check.py          # prints a JSON verdict; exit 0 = it works

Starts two worker processes on 127.0.0.1 (free ports, TF_CONFIG each) that train a tiny Keras model
with model.fit, as TensorFlow's "Multi-worker training with Keras" tutorial does. Until this passes,
`trainer/strategy=multi_worker` is refused in one line (keras-team/keras#20585,
tensorflow/tensorflow#72388); tests/extras/test_distribution.py runs this as a strict expected failure, so the
day an upgrade fixes it the test says so.
"""

import json
import os
import subprocess
import sys

from mha_project.extras.distribution.processes import finish_all

from entry import free_port

WORKER = """
import json, os, sys
import_tensorflow_quietly()
import numpy as np
import tensorflow as tf
import keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(1) > 0).astype("int32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(ds, epochs=2, steps_per_epoch=4, verbose=0)
print("LOSS", json.dumps(history.history["loss"]))
"""


def main() -> int:
    workers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(tf_config))
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    results = []
    for index, (returncode, output) in enumerate(finish_all(processes, timeout=240)):
        last_error = [line for line in output.splitlines() if "Error" in line][-1:]
        results.append({"worker": index, "returncode": returncode, "error": last_error[0] if last_error else ""})
    works = all(r["returncode"] == 0 for r in results)
    print(json.dumps({"multi_worker_fit_works": works, "workers": results}, indent=1))
    return 0 if works else 1


if __name__ == "__main__":
    sys.exit(main())
