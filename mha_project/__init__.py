"""mha-project: a small Transformer encoder classifier built on keras.layers.MultiHeadAttention."""

__version__ = "0.1.0"
