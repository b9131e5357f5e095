"""Speed and time-to-accuracy harnesses behind ``scripts/benchmark.py``; not part of the installed package.

keras_io_recipe: the keras.io recipe as published · throughput: examples/s and memory · race: time to a
validation accuracy, the recipe against this project, in alternating rounds."""
