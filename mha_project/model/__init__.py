"""The model: layers, the encoder backbone, the classifier on it, and their options.

Importing this package is cheap (no Keras): ``mha_project.config`` reads the options below.
"""

PACKAGE = "mha_project"  # the package every layer and model here is registered under with Keras

INPUT_SCALES = ("layer_norm", "sqrt_dim", "none")  # TokenAndPositionEmbedding(input_scale=...)
POSITION_ENCODINGS = ("learned", "rotary")  # model.position_encoding (model/rotary.py, RotaryMultiHeadAttention)
POOLINGS = ("mean", "mean_max", "cls")  # model.pooling (model/classifier.py): the token vectors -> one
