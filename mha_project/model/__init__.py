"""The model: layers, the encoder backbone, the classifier on it, and their options.

Importing this package is cheap (no Keras): ``mha_project.config`` reads the options below.
"""

from mha_project.extending import POSITION_ENCODINGS

PACKAGE = "mha_project"  # the package every layer and model here is registered under with Keras

EMBEDDING_NORMS = ("layer_norm", "sqrt_dim", "none")  # model.embedding_norm: TokenAndPositionEmbedding(embedding_norm=)
LEARNED_POSITIONS = "learned"  # model.position_encoding: a learned table; the extras add theirs (extending.py)
POOLINGS = ("mean", "mean_max", "cls")  # model.pooling (model/classifier.py): the token vectors -> one


def position_encodings() -> tuple[str, ...]:
    """Every ``model.position_encoding``: the learned table and the extras' (``mha_project/extending.py``)."""
    return (LEARNED_POSITIONS, *POSITION_ENCODINGS)
