"""How many processes train together and why ``multi_worker`` is refused (read by the extra's checks and by
``devices.py``; no TensorFlow here), and how the check scripts wait for the processes they start."""

from __future__ import annotations

import os
import subprocess

from mha_project.errors import ConfigError

# Why trainer/strategy=multi_worker is refused: Keras 3's model.fit fails under MultiWorkerMirroredStrategy ("Attempt
# to convert a value (PerReplica...)"), reproduced with two workers on 127.0.0.1 and reported upstream as
# keras-team/keras#20585 / tensorflow/tensorflow#72388.
MULTI_WORKER_UNSUPPORTED = (
    "trainer/strategy=multi_worker is not supported: Keras 3's model.fit fails under "
    "tf.distribute.MultiWorkerMirroredStrategy (keras-team/keras#20585); use trainer/strategy=data_parallel "
    "with KERAS_BACKEND=jax (keras.distribution), on one machine or several"
)


def processes() -> int:
    """How many processes train together: Keras's ``KERAS_DISTRIBUTION_NUM_PROCESSES`` (keras.distribution)."""
    value = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"KERAS_DISTRIBUTION_NUM_PROCESSES={value} is invalid: must be an integer >= 1")
    return int(value)


def finish_all(processes, timeout: float) -> list[tuple[int, str]]:
    """Each started process's exit status and output (text: stdout, and stderr if it is kept apart),
    waiting at most ``timeout`` seconds for each; one that takes longer is killed."""
    results = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        results.append((process.returncode, (out or "") + (err or "")))
    return results
