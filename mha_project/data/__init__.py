"""Text data: sources, the vocabulary, the tf.data pipeline, masking for pretraining.

Importing this package is cheap (no TensorFlow): ``mha_project.config`` reads the options below.
"""

TRUNCATIONS = ("head", "tail", "head_tail")  # data.truncation (data/pipeline.py, truncate_token_ids)
