"""The keras.io "Text classification with Transformer" recipe, as its authors publish it: the peer this
project's speed and time to accuracy are measured against (benchmarks/race.py)."""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

# "Text classification with Transformer" (keras.io/examples/nlp/text_classification_with_transformer),
# as published: 20k words, the last 200 tokens of each review (pad_sequences pads and truncates at the
# front), no padding mask, embed 32, 2 heads x key_dim 32, ff 32, Adam 1e-3, batch 32, 2 epochs.
RECIPE = {"vocab_size": 20000, "maxlen": 200, "embed_dim": 32, "num_heads": 2, "ff_dim": 32, "batch_size": 32}
RECIPE_EPOCHS = 2


def keras_io_recipe_model(num_classes: int = 2):
    """The recipe's model, line for line (its two layers are defined inline there, as here)."""

    class TransformerBlock(layers.Layer):
        def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
            super().__init__()
            self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
            self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
            self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
            self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
            self.dropout1 = layers.Dropout(rate)
            self.dropout2 = layers.Dropout(rate)

        def call(self, inputs):
            attn_output = self.att(inputs, inputs)
            attn_output = self.dropout1(attn_output)
            out1 = self.layernorm1(inputs + attn_output)
            ffn_output = self.ffn(out1)
            ffn_output = self.dropout2(ffn_output)
            return self.layernorm2(out1 + ffn_output)

    class TokenAndPositionEmbedding(layers.Layer):
        def __init__(self, maxlen, vocab_size, embed_dim):
            super().__init__()
            self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
            self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

        def call(self, x):
            maxlen = ops.shape(x)[-1]
            positions = ops.arange(start=0, stop=maxlen, step=1)
            positions = self.pos_emb(positions)
            x = self.token_emb(x)
            return x + positions

    inputs = layers.Input(shape=(RECIPE["maxlen"],))
    x = TokenAndPositionEmbedding(RECIPE["maxlen"], RECIPE["vocab_size"], RECIPE["embed_dim"])(inputs)
    x = TransformerBlock(RECIPE["embed_dim"], RECIPE["num_heads"], RECIPE["ff_dim"])(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def recipe_arrays(rows: list[np.ndarray], maxlen: int) -> np.ndarray:
    """``keras.utils.pad_sequences(rows, maxlen)`` as the recipe calls it: keep the last ``maxlen`` ids,
    pad at the front.

    >>> recipe_arrays([np.array([1, 2, 3]), np.array([4])], maxlen=2).tolist()
    [[2, 3], [0, 4]]
    """
    return keras.utils.pad_sequences([list(r) for r in rows], maxlen=maxlen).astype("int32")
