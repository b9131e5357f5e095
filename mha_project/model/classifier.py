"""The classifier: embeddings -> N x EncoderBlock (MultiHeadAttention) -> masked mean pool -> softmax.

``model.num_heads`` (the ``heads`` shortcut in configs/train.yaml) goes straight into
``EncoderBlock(num_heads=...)``, which builds ``keras.layers.MultiHeadAttention(num_heads=...)``."""

from __future__ import annotations

import keras
from keras import layers

from mha_project.model.heads import FirstTokenPooling, MaskedMaxPooling, MaskedMeanPooling
from mha_project.model.layers import EncoderBlock, TokenAndPositionEmbedding


def build_classifier(model_cfg, vocab_size: int, num_classes: int) -> keras.Model:
    """Build the encoder classifier from the ``model`` config group."""
    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    pooling = model_cfg.get("pooling", "mean")
    rotary = model_cfg.get("position_encoding", "learned") == "rotary"
    x = TokenAndPositionEmbedding(
        vocab_size,
        model_cfg.max_len,
        model_cfg.embed_dim,
        cls_token=pooling == "cls",
        input_scale=model_cfg.get("embedding_norm", "none"),
        learned_positions=not rotary,
        name="embedding",
    )(token_ids)
    x = layers.Dropout(model_cfg.dropout, name="embedding_dropout")(x)
    for i in range(model_cfg.num_layers):
        x = EncoderBlock(
            num_heads=model_cfg.num_heads,
            key_dim=model_cfg.key_dim,
            value_dim=model_cfg.value_dim,
            ff_dim=model_cfg.ff_dim,
            dropout=model_cfg.dropout,
            attention_dropout=model_cfg.get("attention_dropout"),
            activation=model_cfg.activation,
            use_bias=model_cfg.use_bias,
            norm_first=model_cfg.norm_first,
            rotary_positions=rotary,
            name=f"encoder_{i}",
        )(x)
    if model_cfg.norm_first:
        x = layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    if pooling == "cls":
        pooled = FirstTokenPooling(name="cls_pool")(x)
    else:
        pooled = MaskedMeanPooling(name="masked_mean_pool")(x)  # padding excluded from the mean
    if pooling == "mean_max":
        # Max over real tokens as well: a strong single word ("awful") is not averaged away.
        pooled = layers.Concatenate(name="mean_max_pool")([pooled, MaskedMaxPooling(name="masked_max_pool")(x)])
    x = pooled
    x = layers.Dropout(model_cfg.dropout, name="head_dropout")(x)
    # float32 output keeps the softmax stable under mixed precision.
    probs = layers.Dense(num_classes, activation="softmax", dtype="float32", name="classifier")(x)
    return keras.Model(token_ids, probs, name="mha_classifier")


def encoder_blocks(model: keras.Model) -> list[EncoderBlock]:
    return [layer for layer in model.layers if isinstance(layer, EncoderBlock)]


def model_summary(model: keras.Model) -> str:
    """Keras's layer table, preceded by what the table does not show: each block's attention shape."""
    blocks = encoder_blocks(model)
    head = ""
    if blocks:
        block = blocks[0]
        value_dim = block.value_dim or block.key_dim
        head = (
            f"{len(blocks)} encoder block(s), each {type(block.attention).__name__}(num_heads={block.num_heads}, "
            f"key_dim={block.key_dim}, value_dim={value_dim}) on embed_dim {block.ff_outer.units}, "
            f"feed-forward {block.ff_dim}\n"
        )
    lines = []
    model.summary(line_length=100, print_fn=lambda text, line_break=True: lines.append(text))
    return head + "\n".join(lines).rstrip() + "\n"
