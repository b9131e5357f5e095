"""Speed and time-to-accuracy harnesses behind ``scripts/benchmark.py``; not part of the installed package.

keras_io_recipe: the keras.io recipe as published · throughput: examples/s and memory · race: time to a
validation accuracy, the recipe against this project, in alternating rounds."""

import contextlib
import warnings


@contextlib.contextmanager
def expected_end_of_data():
    """Bucketed batches make an epoch's length unknown to Keras up front, so its "ran out of data" warning is
    expected in the benchmarks' own fit loops, not a bug. Scoped: the caller's warning filters stay as they were."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield
