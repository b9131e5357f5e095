"""How many processes train together, and why ``multi_worker`` is refused: read by the extra's checks and by
``devices.py`` (no TensorFlow here)."""

from __future__ import annotations

import os

from mha_project.errors import ConfigError

# Why trainer.distribution=multi_worker is refused (devices.py has the details).
MULTI_WORKER_UNSUPPORTED = (
    "trainer.distribution=multi_worker is not supported: Keras 3's model.fit fails under "
    "tf.distribute.MultiWorkerMirroredStrategy (keras-team/keras#20585); use trainer.distribution=data_parallel "
    "with KERAS_BACKEND=jax (keras.distribution), on one machine or several"
)


def processes() -> int:
    """How many processes train together: Keras's ``KERAS_DISTRIBUTION_NUM_PROCESSES`` (keras.distribution)."""
    value = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"KERAS_DISTRIBUTION_NUM_PROCESSES={value} is invalid: must be an integer >= 1")
    return int(value)
