"""mha-project: a small Transformer encoder classifier built on keras.layers.MultiHeadAttention."""

import os

# Every entry point imports this package before TensorFlow: keep TF's C++ start-up chatter out of the
# user's terminal (set TF_CPP_MIN_LOG_LEVEL=0 to see it).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
